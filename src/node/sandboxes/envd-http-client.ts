/** The node's few calls to a sandbox's envd: health (readiness), init (env, token) and its log ring. */
import { request, type Agent } from "node:http";
import { ENVD_LOGS_PATH, EnvdLogsPage } from "../../contract/envd-logs.ts";

/** A page bigger than this is not read (envd is the sandbox's: never trusted to be small). */
const LOGS_PAGE_BYTES = 8 * 1024 * 1024;

/**
 * One page of envd's log ring after `after` (at most `limit` entries, envd's page size when
 * absent; 0 asks only for its boot and head); rejects on any failure or a malformed page.
 * `agent`: the connection to keep between pulls (none: one connection per pull).
 */
export function fetchEnvdLogs(host: string, port: number, accessToken: string | undefined, after: number, timeoutMs: number, agent?: Agent, limit?: number): Promise<EnvdLogsPage> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host, port, path: `${ENVD_LOGS_PATH}?after=${after}${limit === undefined ? "" : `&limit=${limit}`}`, agent: agent ?? false, timeout: timeoutMs, headers: accessToken ? { "x-access-token": accessToken } : {} },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          size += c.length;
          if (size > LOGS_PAGE_BYTES) req.destroy(new Error(`envd log page over ${LOGS_PAGE_BYTES} bytes`));
          else chunks.push(c);
        });
        res.on("end", () => {
          if (res.statusCode !== 200) return reject(new Error(`envd ${ENVD_LOGS_PATH} answered ${res.statusCode}`));
          try {
            resolve(EnvdLogsPage.parse(JSON.parse(Buffer.concat(chunks).toString("utf8"))));
          } catch (e) {
            reject(e instanceof Error ? e : new Error(String(e)));
          }
        });
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

export function httpStatusOf(host: string, port: number, path: string, opts: { method?: string; body?: string; timeoutMs: number; headers?: Record<string, string> }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host, port, path, method: opts.method ?? "GET", agent: false, timeout: opts.timeoutMs, headers: opts.headers },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(opts.body);
  });
}

/**
 * Polls `GET /health` until 2xx; with `probe`, the caller's own request instead (a restore's
 * POST /init) until envd answers it at all. Resolves with the answer's status. `alive()` is
 * asked now and then so a sandbox whose init died fails fast instead of waiting out the
 * deadline.
 */
export async function waitEnvdHealthy(
  host: string,
  port: number,
  o: { deadlineMs: number; signal: AbortSignal; alive: () => Promise<boolean>; probe?: () => Promise<number> },
): Promise<number> {
  const end = Date.now() + o.deadlineMs;
  let lastCheck = Date.now();
  let lastErr = "";
  for (;;) {
    o.signal.throwIfAborted();
    try {
      const s = o.probe ? await o.probe() : await httpStatusOf(host, port, "/health", { timeoutMs: 1000 });
      if (o.probe || (s >= 200 && s < 300)) return s;
      lastErr = `status ${s}`;
    } catch (e) {
      lastErr = e instanceof Error ? e.message : String(e);
    }
    if (Date.now() > end) throw new Error(`envd at ${host}:${port} not healthy after ${o.deadlineMs} ms (${lastErr})`);
    if (Date.now() - lastCheck > 300) {
      lastCheck = Date.now();
      if (!(await o.alive())) throw new Error(`the sandbox's init exited before envd was healthy (${lastErr})`);
    }
    await new Promise((r) => setTimeout(r, 3));
  }
}
