/**
 * How a gateway request names its sandbox and port (pure, unit-tested). In order:
 * 1. headers `E2b-Sandbox-Id` + `E2b-Sandbox-Port` (the SDK with sandboxUrl);
 * 2. `Host: <port>-<id>.<domain>` (wildcard DNS; getHost() URLs);
 * 3. path form `/sandboxes/<id>/ports/<port>/<rest>` for clients without wildcard DNS
 *    (the prefix is stripped before forwarding);
 * 4. headerless signed file URLs (`/files?…&signature=`): the sandbox is found by
 *    checking the signature against running sandboxes' envd tokens (signature.ts);
 * 5. envd calls with only `X-Access-Token` (Python SDK 2.x before ~2.2x drops the routing
 *    headers after the class-level `Sandbox.connect(id)`): the sandbox whose envd token it is.
 */
import { ENVD_PORT } from "../../contract/node-api.ts";

export const NO_ROUTE =
  "no sandbox named: send E2b-Sandbox-Id (and E2b-Sandbox-Port), use Host <port>-<id>.<domain>, or the path /sandboxes/<id>/ports/<port>/…";

export type GatewayRoute =
  | { kind: "header" | "host" | "path"; sandboxId: string; port: number; path: string }
  | { kind: "signed"; path: string }
  | { kind: "token"; token: string; path: string }
  | { kind: "none"; reason: string };

const ID = "[a-z0-9]{20}";
const HOST_RE = new RegExp(`^(\\d{1,5})-(${ID})(?:\\.|:|$)`);
const PATH_RE = new RegExp(`^/sandboxes/(${ID})/ports/(\\d{1,5})(/[^?]*)?(\\?.*)?$`);

export function resolveRoute(
  headers: Record<string, string | string[] | undefined>,
  url: string,
  sandboxDomain: string | null,
): GatewayRoute {
  const idHeader = first(headers["e2b-sandbox-id"]);
  if (idHeader) {
    const portHeader = first(headers["e2b-sandbox-port"]);
    const port = portHeader ? toPort(portHeader) : ENVD_PORT;
    if (port === null) return { kind: "none", reason: `E2b-Sandbox-Port '${portHeader}' is not a port` };
    return { kind: "header", sandboxId: idHeader, port, path: url };
  }
  const host = (first(headers.host) ?? "").toLowerCase();
  const hm = HOST_RE.exec(host);
  // A domain may carry the gateway's port (`localhost:3001`); the Host's name is matched without it.
  if (hm && (!sandboxDomain || host.split(":")[0]!.endsWith(`.${sandboxDomain.split(":")[0]!.toLowerCase()}`))) {
    const port = toPort(hm[1]!);
    if (port !== null) return { kind: "host", sandboxId: hm[2]!, port, path: url };
  }
  const pm = PATH_RE.exec(url);
  if (pm) {
    const port = toPort(pm[2]!);
    if (port !== null) return { kind: "path", sandboxId: pm[1]!, port, path: `${pm[3] ?? "/"}${pm[4] ?? ""}` };
  }
  const q = url.indexOf("?");
  const pathname = q < 0 ? url : url.slice(0, q);
  if (pathname === "/files" && q >= 0 && new URLSearchParams(url.slice(q + 1)).has("signature")) {
    return { kind: "signed", path: url };
  }
  const token = first(headers["x-access-token"]);
  if (token) return { kind: "token", token, path: url };
  return { kind: "none", reason: NO_ROUTE };
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function toPort(s: string): number | null {
  if (!/^\d{1,5}$/.test(s)) return null;
  const n = Number(s);
  return n >= 1 && n <= 65535 ? n : null;
}
