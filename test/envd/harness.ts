/**
 * Starts envd as a real process on 127.0.0.1 with a random port and gives Connect
 * clients (JSON or binary) for it.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Process } from "../../src/gen/process/process_pb.ts";
import { Filesystem } from "../../src/gen/filesystem/filesystem_pb.ts";

export const TEST_USER = "spaceenvdtest";

/** Creates the unprivileged test user once (uid is whatever useradd picks). */
export function ensureTestUser(): { uid: number; gid: number; home: string } {
  let r = spawnSync("id", ["-u", TEST_USER], { encoding: "utf8" });
  if (r.status !== 0) {
    const add = spawnSync("useradd", ["-m", "-s", "/bin/bash", TEST_USER], { encoding: "utf8" });
    if (add.status !== 0 && !/already exists/.test(add.stderr)) throw new Error(`useradd: ${add.stderr}`);
    r = spawnSync("id", ["-u", TEST_USER], { encoding: "utf8" });
  }
  const gid = Number(spawnSync("id", ["-g", TEST_USER], { encoding: "utf8" }).stdout.trim());
  return { uid: Number(r.stdout.trim()), gid, home: `/home/${TEST_USER}` };
}

export interface RunningEnvd {
  url: string;
  port: number;
  child: ChildProcess;
  stop(): Promise<void>;
  process(opts?: ClientOpts): Client<typeof Process>;
  fs(opts?: ClientOpts): Client<typeof Filesystem>;
}

export interface ClientOpts {
  binary?: boolean;
  user?: string;
  token?: string;
  keepaliveS?: number;
}

export async function startEnvd(
  /** bundle: dist/envd/envd.mjs; snapshot: its V8 startup snapshot (dist/envd/envd.blob); else the sources. */
  opts: { token?: string; bundle?: boolean; snapshot?: boolean; env?: Record<string, string>; pid1?: boolean } = {},
): Promise<RunningEnvd> {
  const dir = mkdtempSync(join(tmpdir(), "envd-test-"));
  const args = ["--port", "0", "--host", "127.0.0.1", "--default-user", TEST_USER];
  if (opts.token) {
    const f = join(dir, "token");
    (await import("node:fs")).writeFileSync(f, opts.token);
    args.push("--access-token-file", f);
  }
  const argv = opts.snapshot
    ? ["--snapshot-blob", "dist/envd/envd.blob", "--", ...args]
    : opts.bundle
      ? ["dist/envd/envd.mjs", ...args]
      : ["--import", "tsx", "src/envd/main.ts", ...args];
  // pid1: run envd as PID 1 of a new pid namespace (sees only its own processes).
  const [file, fileArgs] = opts.pid1
    ? ["unshare", ["--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", process.execPath, ...argv]]
    : [process.execPath, argv];
  const child = spawn(file, fileArgs, {
    // Own process group: unshare ignores SIGTERM while it waits, so stop() signals the group.
    detached: !!opts.pid1,
    stdio: ["ignore", "ignore", "pipe"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANG: "C.UTF-8", ...opts.env },
  });
  const port = await new Promise<number>((resolve, reject) => {
    let buf = "";
    const t = setTimeout(() => reject(new Error(`envd did not start: ${buf}`)), 15_000);
    child.stderr!.on("data", (d: Buffer) => {
      buf += d.toString();
      const m = /"msg":"listening".*?"port":(\d+)/.exec(buf);
      if (m) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    });
    child.once("exit", (c) => reject(new Error(`envd exited ${c}: ${buf}`)));
  });
  child.stderr!.resume();
  const url = `http://127.0.0.1:${port}`;
  const headers =
    (o: ClientOpts): Interceptor =>
    (next) =>
    async (req) => {
      if (o.user) req.header.set("authorization", `Basic ${Buffer.from(`${o.user}:`).toString("base64")}`);
      if (o.token) req.header.set("x-access-token", o.token);
      if (o.keepaliveS) req.header.set("keepalive-ping-interval", String(o.keepaliveS));
      return next(req);
    };
  const transport = (o: ClientOpts) =>
    createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: !!o.binary, interceptors: [headers(o)] });
  return {
    url,
    port,
    child,
    process: (o = {}) => createClient(Process, transport(o)),
    fs: (o = {}) => createClient(Filesystem, transport(o)),
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      if (opts.pid1) process.kill(-child.pid!, "SIGTERM");
      else child.kill("SIGTERM");
      await exited;
    },
  };
}

/** Deadline-based wait (never a bare sleep). */
export async function waitFor<T>(f: () => T | Promise<T>, timeoutMs = 5000, what = "condition"): Promise<NonNullable<T>> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v) return v as NonNullable<T>;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Encodes one Connect envelope (flags 0). */
export function envelope(json: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(json));
  const h = Buffer.alloc(5);
  h.writeUInt32BE(body.length, 1);
  return Buffer.concat([h, body]);
}

/** Splits a Connect streaming body into envelopes. */
export function parseEnvelopes(buf: Buffer): { flags: number; json: unknown }[] {
  const out: { flags: number; json: unknown }[] = [];
  let o = 0;
  while (o + 5 <= buf.length) {
    const flags = buf[o]!;
    const len = buf.readUInt32BE(o + 1);
    out.push({ flags, json: JSON.parse(buf.subarray(o + 5, o + 5 + len).toString("utf8")) });
    o += 5 + len;
  }
  if (o !== buf.length) throw new Error(`trailing ${buf.length - o} bytes`);
  return out;
}
