/** A process's CPU from /proc (benches): its name and the user + system time it used so far, in ms. */
import { readFileSync } from "node:fs";

const TICK_MS = 1000 / 100; // USER_HZ

/** `{ comm: "", ms: 0 }` for a process that is gone (exited meanwhile). */
export function processCpu(pid: string | number): { comm: string; ms: number } {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8");
    const rest = f.slice(f.lastIndexOf(")") + 2).split(" ");
    return { comm: f.slice(f.indexOf("(") + 1, f.lastIndexOf(")")), ms: (Number(rest[11]) + Number(rest[12])) * TICK_MS };
  } catch {
    return { comm: "", ms: 0 };
  }
}
