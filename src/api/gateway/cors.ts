/**
 * CORS for envd through the gateway, so a page on another origin (the dashboard, served by
 * the API on its own port) can call envd's Connect and /files routes with fetch(). envd's
 * credential is the `X-Access-Token` header, never a cookie, so any origin may be allowed:
 * a page that can send the token could use it anyway (E2B's envd allows every origin too).
 * Only the envd port: a sandbox's own public ports answer their own CORS.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";

const ALLOWED_HEADERS = [
  "authorization",
  "content-type",
  "connect-protocol-version",
  "connect-timeout-ms",
  "keepalive-ping-interval",
  "x-access-token",
  "e2b-sandbox-id",
  "e2b-sandbox-port",
].join(", ");

/** The answer to a preflight (OPTIONS with Access-Control-Request-Method), or null when it is not one. */
export function preflightHeaders(method: string | undefined, headers: IncomingHttpHeaders): OutgoingHttpHeaders | null {
  if (method !== "OPTIONS" || !headers["access-control-request-method"]) return null;
  return {
    "access-control-allow-origin": "*",
    "access-control-allow-methods": "GET, POST, PUT, DELETE, OPTIONS",
    "access-control-allow-headers": ALLOWED_HEADERS,
    "access-control-max-age": "600",
  };
}

/** Added to an envd response when the request came from a page (it carried Origin). */
export function responseCors(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  if (!headers.origin) return {};
  return { "access-control-allow-origin": "*", "access-control-expose-headers": "content-type, content-disposition, connect-content-encoding, grpc-status, grpc-message" };
}
