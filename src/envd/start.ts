/**
 * envd's body: build dependencies from the flags, listen. Runs as the sandbox's PID 1:
 * SIGTERM/SIGINT end child processes and exit; orphans re-parented to PID 1 are reaped
 * by `reaper.ts` (see there for the trade-off). Entries: main.ts (ESM) and snapshot.ts
 * (V8 startup snapshot).
 */
import { ENVD_VERSION, parseConfig } from "./envd-config.ts";
import { EnvdState } from "./state.ts";
import { Users } from "./users.ts";
import { ProcessManager } from "./process/manager.ts";
import { loadSpawner } from "./process/spawner.ts";
import { FileMetadata, loadXattr } from "./filesystem/metadata.ts";
import { Watchers } from "./filesystem/watchers.ts";
import { createEnvdServer } from "./server.ts";
import type { Envd } from "./context.ts";
import { startReaper } from "./reaper.ts";
import { EnvdLogRing } from "./log-ring.ts";
import type { LogLevel } from "../contract/envd-logs.ts";
import { loadPrivileges } from "./privileges.ts";
import { signalReady } from "./ready-signal.ts";

/**
 * `argv`: envd's own flags. `dir`: where the native addons live (reaper.node,
 * xattr.node, node_modules/node-pty), i.e. the bundle's directory.
 */
export function startEnvd(argv: string[], dir: string): void {
  const cfg = parseConfig(argv, process.env);
  const logs = new EnvdLogRing(cfg.logEntries);
  const log = (msg: string, fields?: Record<string, unknown>, level: LogLevel = "info"): void => {
    const e = logs.push(level, msg, fields);
    process.stderr.write(JSON.stringify({ t: e.timestamp, svc: "envd", level, msg, ...fields }) + "\n");
  };
  const processes = new ProcessManager(dir, loadSpawner(dir, log));
  const watchers = new Watchers();
  const users = new Users();
  const privileges = loadPrivileges(dir, users, log);
  // Before anything secret is in memory (the token and env vars arrive with POST /init).
  if (!privileges.makeUndumpable()) log("envd could not make itself undumpable: the sandbox's root can ptrace it", {}, "warn");
  const envd: Envd = {
    state: new EnvdState(cfg),
    users,
    processes,
    metadata: new FileMetadata(loadXattr(dir, log), log),
    watchers,
    privileges,
    log,
    logs,
  };
  const server = createEnvdServer(envd);
  server.listen(cfg.port, cfg.host, () => {
    const addr = server.address();
    const port = typeof addr === "object" && addr ? addr.port : cfg.port;
    // The node waits on this: first, before anything else.
    const signalled = signalReady(cfg.readyFd);
    log("listening", { version: ENVD_VERSION, host: cfg.host, port, pid: process.pid, readySignalled: signalled });
  });
  // As PID 1 (or when asked), reap orphans that libuv does not wait for.
  if (process.pid === 1 || process.env.SPACE_ENVD_REAPER === "1") {
    const reaper = startReaper(dir, (pid) => processes.has(pid), log);
    processes.onExit = () => setTimeout(() => reaper.sweep(), 50);
  }
  processes.onEnd = (p, end) => {
    log("process ended", { logger: "processSvc", pid: p.pid, tag: p.tag, exitCode: end.exitCode, status: end.status }, end.exitCode === 0 ? "info" : "warn");
  };

  let stopping = false;
  const stop = (sig: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    log("stopping", { signal: sig });
    processes.killAll("SIGTERM");
    watchers.closeAll();
    server.close();
    server.closeAllConnections();
    setTimeout(() => {
      processes.killAll("SIGKILL");
      process.exit(0);
    }, 2000).unref();
    setTimeout(() => process.exit(0), 100).unref();
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  // A broken client socket must never take the sandbox's PID 1 down.
  process.on("uncaughtException", (e) => log("uncaught exception", { error: String(e?.stack ?? e) }, "error"));
  process.on("unhandledRejection", (e) => log("unhandled rejection", { error: String(e) }, "error"));
}
