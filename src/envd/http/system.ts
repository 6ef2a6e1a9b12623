/** `GET /envs`, `GET /metrics`, `POST /init`. */
import { readFileSync } from "node:fs";
import { statfs } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { availableParallelism, cpus, freemem, totalmem } from "node:os";
import { EnvdInitBody } from "../../contract/envd-init.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Envd } from "../context.ts";
import { sendError, sendJson } from "./respond.ts";

export function getEnvs(envd: Envd, res: ServerResponse): void {
  sendJson(res, 200, envd.state.envVars);
}

let lastCpu: { busy: number; total: number } | undefined;
function cpuSample(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const c of cpus()) {
    const t = c.times;
    busy += t.user + t.nice + t.sys + t.irq;
    total += t.user + t.nice + t.sys + t.irq + t.idle;
  }
  return { busy, total };
}

function readNum(path: string): number | undefined {
  try {
    const v = readFileSync(path, "utf8").trim();
    const n = Number(v);
    return Number.isFinite(n) ? n : undefined;
  } catch {
    return undefined;
  }
}

/** Memory of this sandbox: its cgroup when visible (v2 then v1), else the machine. */
function memory(): { used: number; total: number } {
  const hostTotal = totalmem();
  const v2used = readNum("/sys/fs/cgroup/memory.current");
  if (v2used !== undefined) {
    const max = readNum("/sys/fs/cgroup/memory.max");
    return { used: v2used, total: max && max < hostTotal ? max : hostTotal };
  }
  const v1used = readNum("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  if (v1used !== undefined) {
    const lim = readNum("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    return { used: v1used, total: lim && lim < hostTotal ? lim : hostTotal };
  }
  return { used: hostTotal - freemem(), total: hostTotal };
}

export async function getMetrics(_envd: Envd, res: ServerResponse): Promise<void> {
  try {
    const now = cpuSample();
    const prev = lastCpu;
    lastCpu = now;
    const dt = prev ? now.total - prev.total : 0;
    const cpuUsedPct = prev && dt > 0 ? Math.round(((now.busy - prev.busy) / dt) * 10000) / 100 : 0;
    const mem = memory();
    const fs = await statfs("/");
    const diskTotal = fs.blocks * fs.bsize;
    const diskUsed = (fs.blocks - fs.bfree) * fs.bsize;
    sendJson(res, 200, {
      ts: Math.floor(Date.now() / 1000),
      cpu_count: availableParallelism(),
      cpu_used_pct: cpuUsedPct,
      mem_total_mib: Math.floor(mem.total / 1048576),
      mem_used_mib: Math.floor(mem.used / 1048576),
      mem_total: mem.total,
      mem_used: mem.used,
      disk_used: diskUsed,
      disk_total: diskTotal,
    });
  } catch (e: unknown) {
    sendError(res, e);
  }
}

/**
 * Parses a body like the node's once. zod builds a schema's parser on its first use: the
 * first /init, which a cold-created sandbox meets only when it is restored, paid ~2-3 ms
 * for it. envd's startup snapshot calls this while it is built, so envd starts with the
 * parser made.
 */
export function warmInitBody(): void {
  EnvdInitBody.safeParse({ envVars: { NAME: "value" }, accessToken: "token", timestamp: "2026-01-01T00:00:00.000Z" });
}

async function readBody(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > limitBytes) throw new SpaceError("invalid_argument", `body larger than ${limitBytes} bytes`);
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

/** The node sets env vars, access token, default user and workdir (start, restore). */
export async function postInit(envd: Envd, req: IncomingMessage, res: ServerResponse): Promise<void> {
  try {
    const raw = await readBody(req, 1024 * 1024);
    let json: unknown = {};
    if (raw.length) {
      try {
        json = JSON.parse(raw.toString("utf8"));
      } catch {
        throw new SpaceError("invalid_argument", "init body is not JSON");
      }
    }
    const parsed = EnvdInitBody.safeParse(json);
    if (!parsed.success) throw new SpaceError("invalid_argument", `invalid init body: ${parsed.error.message}`);
    const b = parsed.data;
    if (b.envVars) envd.state.envVars = { ...envd.state.envVars, ...b.envVars };
    if (b.accessToken !== undefined) envd.state.accessToken = b.accessToken || undefined;
    if (b.defaultUser) envd.state.defaultUser = b.defaultUser;
    if (b.defaultWorkdir) envd.state.defaultWorkdir = b.defaultWorkdir;
    envd.log("init", { envVars: Object.keys(b.envVars ?? {}).length, token: b.accessToken !== undefined });
    res.writeHead(204);
    res.end();
  } catch (e: unknown) {
    sendError(res, e);
  }
}
