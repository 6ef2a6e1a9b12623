/**
 * Zombie reaping when envd is PID 1. Node cannot waitpid(-1) (libuv waits only for its
 * own children), so orphans re-parented to PID 1 (e.g. `cmd &` in a shell that has
 * exited) would stay zombies. A tiny N-API addon (native/reaper.c, built next to the
 * bundle as reaper.node) reaps one given pid; here we find zombie children in /proc and
 * reap those envd does not track itself (libuv and node-pty reap their own, and a pid
 * is tracked from the tick it is spawned until its exit has been observed).
 * Without the addon, zombies are only counted and logged.
 *
 * A sweep runs when a child ends (SIGCHLD: an orphan's end signals PID 1 too), not on a
 * short timer: a node holds hundreds of idle sandboxes, and a timer per envd woke each one
 * every second for nothing. The slow timer is only a safety net.
 */
import { readdirSync, readFileSync } from "node:fs";
import { loadAddon, type Log } from "./native-addon.ts";

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

export interface Reaper {
  /** Reaps untracked zombies now (call after a process ends). */
  sweep(): void;
  stop(): void;
}

export function startReaper(dir: string, isTracked: (pid: number) => boolean, log: Log, intervalMs = 60_000): Reaper {
  const addon = loadAddon<{ reap(pid: number): number }>(dir, "reaper", log);
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
  // Signals that come together get one sweep, after the tick's own exit handling (libuv reaps its children first).
  let queued = false;
  const onChild = () => {
    if (queued) return;
    queued = true;
    setImmediate(() => {
      queued = false;
      sweep();
    });
  };
  process.on("SIGCHLD", onChild);
  const t = setInterval(sweep, intervalMs);
  t.unref();
  return {
    sweep,
    stop: () => {
      clearInterval(t);
      process.off("SIGCHLD", onChild);
    },
  };
}
