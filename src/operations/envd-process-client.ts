/**
 * A Connect client for a sandbox's envd, reached through the substrate's proxy target
 * (the node's raw proxy into port 49983). Connect errors come back as SpaceError with
 * the matching taxonomy code, so a refused command (`invalid_argument`) stays one.
 */
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { SpaceError, type ErrorCode } from "../core/errors.ts";
import { withTraceHeaders } from "../core/tracing.ts";
import { Process } from "../gen/process/process_pb.ts";
import { ENDED_PROCESSES_PATH, EndedProcessSchema, type EndedProcess } from "../contract/ended-process.ts";
import type { ProxyTarget } from "../substrate/substrate.ts";

export type ProcessClient = Client<typeof Process>;

export interface EnvdAuth {
  /** envd's X-Access-Token for secure sandboxes. */
  accessToken?: string | null;
  /** Unix user to run as (`Authorization: Basic base64("<user>:")`), when the proxy leaves that header free. */
  user?: string;
}

/** The proxy target's headers and envd's access token. */
export function envdHeaders(target: ProxyTarget, auth: EnvdAuth): Record<string, string> {
  const headers: Record<string, string> = { ...target.headers };
  if (auth.accessToken) headers["x-access-token"] = auth.accessToken;
  return headers;
}

/**
 * How envd's process tagged `tag` ended (envd keeps the last few minutes of tagged
 * processes, SPACE-only route); undefined when envd keeps no record of it.
 */
export async function endedProcess(target: ProxyTarget, auth: EnvdAuth, tag: string, signal: AbortSignal): Promise<EndedProcess | undefined> {
  const url = `${target.baseUrl.toString().replace(/\/+$/, "")}${ENDED_PROCESSES_PATH}?tag=${encodeURIComponent(tag)}`;
  const res = await fetch(url, { headers: envdHeaders(target, auth), signal });
  if (res.status === 404) {
    await res.body?.cancel();
    return undefined;
  }
  const text = await res.text();
  if (!res.ok) throw new SpaceError(res.status === 401 ? "unauthenticated" : "unavailable", `envd ${ENDED_PROCESSES_PATH} for tag ${tag}: HTTP ${res.status} ${text.slice(0, 200)}`);
  const parsed = EndedProcessSchema.safeParse(JSON.parse(text));
  if (!parsed.success) throw new SpaceError("internal", `envd ${ENDED_PROCESSES_PATH} for tag ${tag}: bad body: ${parsed.error.message}`);
  return parsed.data;
}

export function processClient(target: ProxyTarget, auth: EnvdAuth = {}): ProcessClient {
  const headers = envdHeaders(target, auth);
  // The node proxy authenticates the control plane with `authorization`; envd reads the
  // user from the same header name. Only set it when the proxy does not use it.
  if (auth.user && !Object.keys(headers).some((h) => h.toLowerCase() === "authorization")) {
    headers.authorization = `Basic ${Buffer.from(`${auth.user}:`).toString("base64")}`;
  }
  const addHeaders: Interceptor = (next) => (req) => {
    // Per call: the active span's traceparent rides to the node (its proxy span) and on to envd.
    for (const [k, v] of Object.entries(withTraceHeaders({ ...headers }))) req.header.set(k, v);
    return next(req);
  };
  const transport = createConnectTransport({
    baseUrl: target.baseUrl.toString().replace(/\/+$/, ""),
    httpVersion: "1.1",
    interceptors: [addHeaders],
  });
  return createClient(Process, transport);
}

/** Connect code → taxonomy code (the inverse of envd's toConnectCode). */
export function fromConnectError(e: unknown, what: string): SpaceError {
  if (e instanceof SpaceError) return e;
  if (!(e instanceof ConnectError)) return SpaceError.from(e);
  const code: ErrorCode = (() => {
    switch (e.code) {
      case Code.InvalidArgument:
      case Code.OutOfRange:
        return "invalid_argument";
      case Code.NotFound:
        return "not_found";
      case Code.AlreadyExists:
        return "already_exists";
      case Code.FailedPrecondition:
        return "failed_precondition";
      case Code.Aborted:
        return "aborted";
      case Code.ResourceExhausted:
        return "resource_exhausted";
      case Code.Unauthenticated:
        return "unauthenticated";
      case Code.PermissionDenied:
        return "permission_denied";
      case Code.Unimplemented:
        return "unimplemented";
      case Code.DeadlineExceeded:
        return "deadline_exceeded";
      case Code.Canceled:
        return "canceled";
      case Code.Unavailable:
        return "unavailable";
      default:
        return "internal";
    }
  })();
  return new SpaceError(code, `${what}: ${e.rawMessage}`, { cause: e });
}
