/** The node's few calls to a sandbox's envd: health (readiness) and init (env, token). */
import { request } from "node:http";

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
 * Polls `GET /health` until 2xx. `alive()` is asked now and then so a sandbox whose init
 * died fails fast instead of waiting out the deadline.
 */
export async function waitEnvdHealthy(
  host: string,
  port: number,
  o: { deadlineMs: number; signal: AbortSignal; alive: () => Promise<boolean> },
): Promise<void> {
  const end = Date.now() + o.deadlineMs;
  let lastCheck = Date.now();
  let lastErr = "";
  for (;;) {
    o.signal.throwIfAborted();
    try {
      const s = await httpStatusOf(host, port, "/health", { timeoutMs: 1000 });
      if (s >= 200 && s < 300) return;
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
