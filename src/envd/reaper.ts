/**
 * Zombie reaping when envd is PID 1. Node cannot waitpid(-1) (libuv waits only for its
 * own children), so orphans re-parented to PID 1 (e.g. `cmd &` in a shell that has
 * exited) would stay zombies. A tiny N-API addon (native/reaper.c, built next to the
 * bundle as reaper.node) reaps one given pid; here we find zombie children in /proc and
 * reap those envd does not track itself (libuv and node-pty reap their own, and a pid
 * is tracked from the tick it is spawned until its exit has been observed).
 * Without the addon, zombies are only counted and logged.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

type Log = (msg: string, f?: Record<string, unknown>) => void;

export function zombieChildren(): number[] {
  const out: number[] = [];
  const me = String(process.pid);
  for (const d of readdirSync("/proc")) {
    if (d.charCodeAt(0) > 57) continue; // not a digit: not a pid
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const rest = s.slice(s.lastIndexOf(")") + 2).split(" ", 2);
      if (rest[0] === "Z" && rest[1] === me) out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** `dir`: the bundle's directory (or src/envd in development, beside dist/envd). */
function loadAddon(dir: string, log: Log): { reap(pid: number): number } | undefined {
  const candidates = [join(dir, "reaper.node"), join(dir, "..", "..", "dist", "envd", "reaper.node")];
  const req = createRequire(join(dir, "envd"));
  for (const c of candidates) {
    if (!existsSync(c)) continue;
    try {
      return req(c) as { reap(pid: number): number };
    } catch (e: unknown) {
      log("reaper addon failed to load", { path: c, error: String(e) });
    }
  }
  return undefined;
}

export interface Reaper {
  /** Reaps untracked zombies now (call after a process ends). */
  sweep(): void;
  stop(): void;
}

export function startReaper(dir: string, isTracked: (pid: number) => boolean, log: Log, intervalMs = 1000): Reaper {
  const addon = loadAddon(dir, log);
  if (!addon) log("no reaper addon: orphaned zombies will accumulate (counted only)");
  let lastCount = 0;
  const sweep = () => {
    let zombies: number[];
    try {
      zombies = zombieChildren();
    } catch {
      return;
    }
    let left = 0;
    for (const pid of zombies) {
      if (isTracked(pid)) continue;
      if (!addon || addon.reap(pid) !== 1) left++;
    }
    if (left !== lastCount && left > 0) log("unreaped zombie children", { count: left });
    lastCount = left;
  };
  const t = setInterval(sweep, intervalMs);
  t.unref();
  return { sweep, stop: () => clearInterval(t) };
}
