/**
 * The cgroup v1 freezer of a container, written directly. `runc pause` and `runc resume`
 * write these same files (and runc reads "paused" back from them), but each is a Go
 * process start, ~4.5 ms here, on the path of every pause and capture, twice for a fork
 * (freeze, then thaw after the dump). Directly: ~0.2 ms.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { unavailable } from "../../core/errors.ts";

/** runc's bound (libcontainer/cgroups/fs/freezer.go): tries, and a thaw every 50th to unstick a task. */
const TRIES = 1000;
const UNSTICK_EVERY = 50;
const UNSTICK_MS = 10;

const state = (dir: string) => readFileSync(join(dir, "freezer.state"), "utf8").trim();
const write = (dir: string, v: "FROZEN" | "THAWED") => writeFileSync(join(dir, "freezer.state"), v);

/** Freezes every task of the cgroup at `dir` and returns once the kernel reports FROZEN. */
export async function freeze(dir: string, signal: AbortSignal): Promise<void> {
  for (let i = 0; i < TRIES; i++) {
    signal.throwIfAborted();
    if (i % UNSTICK_EVERY === UNSTICK_EVERY - 1) {
      write(dir, "THAWED");
      await new Promise((r) => setTimeout(r, UNSTICK_MS));
    }
    write(dir, "FROZEN");
    if (state(dir) === "FROZEN") return;
    // FREEZING: the kernel is still stopping tasks; let the event loop run meanwhile.
    await new Promise((r) => setImmediate(r));
  }
  write(dir, "THAWED");
  throw unavailable(`the tasks of ${dir} did not freeze after ${TRIES} tries`);
}

/** Thaws the cgroup at `dir` (at once: a thaw never waits on tasks). */
export function thaw(dir: string): void {
  write(dir, "THAWED");
}
