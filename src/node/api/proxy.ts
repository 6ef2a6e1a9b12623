/**
 * Raw streaming proxy into a sandbox: `ANY /v1/sandboxes/:id/proxy/:port/*`. Nothing is
 * buffered: the request body streams to the sandbox and the response streams back (Connect
 * server-streaming, large uploads). When the sandbox is stopped or killed, its open streams
 * are cut. The node's internal token never reaches the sandbox.
 */
import { request, type IncomingMessage, type ServerResponse } from "node:http";
import type { SandboxManager } from "../sandboxes/manager.ts";

const HOP = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer", "host"]);

export function proxyToSandbox(
  manager: SandboxManager,
  id: string,
  port: number,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
  stripAuthorization: boolean,
): void {
  const target = manager.target(id, port);
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined || HOP.has(k) || k === "x-space-node-token") continue;
    if (k === "authorization" && stripAuthorization) continue;
    headers[k] = v;
  }
  headers.host = `${target.host}:${target.port}`;
  const upstream = request({ host: target.host, port: target.port, method: req.method, path, headers, agent: false });
  const onDead = () => {
    upstream.destroy(new Error(`sandbox ${id} ended`));
    res.destroy();
  };
  manager.events.once(`dead:${id}`, onDead);
  const done = () => manager.events.off(`dead:${id}`, onDead);
  res.on("close", () => {
    done();
    upstream.destroy();
  });
  upstream.on("response", (up) => {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v;
    res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
    res.flushHeaders();
    up.pipe(res);
    up.on("error", () => res.destroy());
  });
  upstream.on("error", (e) => {
    done();
    if (!res.headersSent) {
      res.writeHead(502, { "content-type": "application/json" });
      res.end(JSON.stringify({ code: "unavailable", message: `sandbox ${id} port ${port}: ${e.message}` }));
    } else res.destroy();
  });
  req.pipe(upstream);
  req.on("aborted", () => upstream.destroy());
}
