/**
 * What a built template asks of every sandbox booted from it (recorded by the builder
 * in the template's metadata, node/templates/builder.ts): its ENV as defaults under the
 * sandbox's own env vars, its WORKDIR and USER as envd's defaults, and its start command,
 * started in the background through envd once envd is up, with its ready command polled
 * under a bounded deadline before the sandbox is reported running.
 */
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Process } from "../../gen/process/process_pb.ts";
import type { Logger } from "../../core/log.ts";
import type { TemplateInfo } from "../disk/disks.ts";

export interface TemplateBoot {
  env: Record<string, string>;
  /** envd's default working directory (absent: the user's home). */
  workdir?: string;
  /** envd's default user (absent: `user`). */
  user?: string;
  startCmd?: string;
  readyCmd?: string;
}

/** The boot settings of a template's metadata (none for imported templates such as `base`). */
export function templateBoot(info: TemplateInfo | undefined): TemplateBoot {
  const t = (info ?? {}) as Partial<{ env: unknown; workdir: unknown; defaultUser: unknown; startCmd: unknown; readyCmd: unknown }>;
  const str = (v: unknown) => (typeof v === "string" && v ? v : undefined);
  const env: Record<string, string> = {};
  if (t.env && typeof t.env === "object") for (const [k, v] of Object.entries(t.env)) if (typeof v === "string") env[k] = v;
  const out: TemplateBoot = { env };
  // `/` is the builder's starting point, not a choice: keep envd's default (the home).
  const workdir = str(t.workdir);
  if (workdir && workdir !== "/") out.workdir = workdir;
  const user = str(t.defaultUser);
  if (user) out.user = user;
  const startCmd = str(t.startCmd);
  if (startCmd) out.startCmd = startCmd;
  const readyCmd = str(t.readyCmd);
  if (readyCmd) out.readyCmd = readyCmd;
  return out;
}

export const START_CMD_TAG = "space-template-start";

function client(host: string, port: number, accessToken: string | undefined) {
  const auth: Interceptor = (next) => (req) => {
    if (accessToken) req.header.set("x-access-token", accessToken);
    return next(req);
  };
  // JSON, as the e2b SDKs speak it: a capture after boot's warm-up then compiles the path their commands take.
  return createClient(Process, createConnectTransport({ baseUrl: `http://${host}:${port}`, httpVersion: "1.1", useBinaryFormat: false, interceptors: [auth] }));
}

/**
 * Starts the template's start command in the background (as envd's default user, in its
 * default workdir, with the sandbox's env): waits for envd's `start` event only, then
 * leaves the process running (closing the stream does not end it).
 */
export async function startTemplateCommand(host: string, port: number, accessToken: string | undefined, cmd: string, signal: AbortSignal): Promise<number> {
  const ac = new AbortController();
  const onAbort = () => ac.abort();
  signal.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => ac.abort(), 10_000);
  try {
    const stream = client(host, port, accessToken).start(
      { process: { cmd: "/bin/bash", args: ["-l", "-c", cmd], envs: {} }, tag: START_CMD_TAG, stdin: false },
      { signal: ac.signal },
    );
    for await (const r of stream) {
      const ev = r.event?.event;
      if (ev?.case === "start") return ev.value.pid;
      if (ev?.case === "end") throw new Error(`the start command ended at once: ${ev.value.status}`);
    }
    throw new Error("envd closed the start command's stream before it started");
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", onAbort);
    ac.abort(); // stop listening; the process keeps running in envd
  }
}

/** Runs `cmd` once through envd (`bash -l -c`, as the SDK runs commands); true if it exits 0. */
export async function succeedsOnce(host: string, port: number, accessToken: string | undefined, cmd: string, signal: AbortSignal): Promise<boolean> {
  const stream = client(host, port, accessToken).start(
    { process: { cmd: "/bin/bash", args: ["-l", "-c", cmd], envs: {} }, stdin: false },
    { signal, timeoutMs: 10_000 },
  );
  for await (const r of stream) {
    const ev = r.event?.event;
    if (ev?.case === "end") return ev.value.exited && ev.value.exitCode === 0;
  }
  return false;
}

/**
 * Polls the ready command until it succeeds or `deadlineMs` passes. Past the deadline the
 * sandbox is still reported running (its start command may just be slow); a warning says so.
 */
export async function waitTemplateReady(
  host: string,
  port: number,
  accessToken: string | undefined,
  cmd: string,
  o: { deadlineMs: number; signal: AbortSignal; logger: Logger; sandboxId: string },
): Promise<boolean> {
  const end = Date.now() + o.deadlineMs;
  let last = "";
  while (Date.now() < end) {
    o.signal.throwIfAborted();
    try {
      if (await succeedsOnce(host, port, accessToken, cmd, AbortSignal.any([o.signal, AbortSignal.timeout(Math.max(1000, end - Date.now()))]))) return true;
      last = "not ready";
    } catch (e) {
      o.signal.throwIfAborted();
      last = e instanceof Error ? e.message : String(e);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  o.logger.warn({ sandboxId: o.sandboxId, readyCmd: cmd, last }, `the template's ready command did not succeed within ${o.deadlineMs} ms; reporting the sandbox running anyway`);
  return false;
}
