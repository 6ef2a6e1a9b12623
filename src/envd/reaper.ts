/**
 * Zombie reaping when envd is PID 1. Node cannot waitpid(-1): libuv only waits for the
 * children it spawned. Orphans re-parented to PID 1 (e.g. `cmd &` in a finished shell)
 * therefore stay zombies. Mitigation kept dependency-free: periodically count zombie
 * children of PID 1 and log them, so the leak is visible; commands are started in their
 * own process group and killed as a group, which keeps orphans rare.
 * TODO: a tiny native reaper (waitid(P_ALL, WNOWAIT) filtered by envd's own pids).
 */
import { readdirSync, readFileSync } from "node:fs";

export function zombieChildren(): number[] {
  const out: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const rest = s.slice(s.lastIndexOf(")") + 2).split(" ");
      if (rest[0] === "Z" && rest[1] === String(process.pid)) out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

export function startReaper(log: (msg: string, f?: Record<string, unknown>) => void): void {
  let last = 0;
  const t = setInterval(() => {
    const z = zombieChildren().length;
    if (z !== last && z > 0) log("zombie children of PID 1", { count: z });
    last = z;
  }, 60_000);
  t.unref();
}
