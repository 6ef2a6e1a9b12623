/**
 * Background work: what nobody is waiting for (warm pool refills). Commands started
 * inside `inBackground` run at BACKGROUND_NICE, so on a small node the requests someone
 * waits for win the CPU; the sandbox such work boots gets a low CPU weight until it is
 * adopted (node/sandboxes). Carried by AsyncLocalStorage so the disk, slot and runtime
 * layers need no priority argument.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { setPriority } from "node:os";

const background = new AsyncLocalStorage<true>();

/** nice(1) level of background commands (0 = normal, 19 = lowest). */
export const BACKGROUND_NICE = 10;

export function inBackground<T>(fn: () => Promise<T>): Promise<T> {
  return background.run(true, fn);
}

export function isBackground(): boolean {
  return background.getStore() === true;
}

/** Lowers a just-started child when the caller runs in the background (best effort: it may already have exited). */
export function applyPriority(pid: number | undefined): void {
  if (pid === undefined || !isBackground()) return;
  try {
    setPriority(pid, BACKGROUND_NICE);
  } catch {
    /* gone already */
  }
}

/** Back to normal priority (adoption): best effort per pid. */
export function restorePriority(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      setPriority(pid, 0);
    } catch {
      /* gone already */
    }
  }
}
