/**
 * envd's "I listen" to the node: the node hands the init the write end of a FIFO as fd
 * `SPACE_ENVD_READY_FD` (runc `--preserve-fds`; node/sandboxes/envd-ready.ts reads it), so
 * it learns envd's readiness from one write instead of polling `/health`. The fd is
 * written once and closed at once, before any process of the sandbox exists: nothing in
 * the sandbox ever holds it, and a memory checkpoint (CRIU) never meets it. It is used
 * only when it is a FIFO: a number pointing at anything else (an fd of envd's own) is left
 * alone.
 */
import { closeSync, fstatSync, writeSync } from "node:fs";

export const READY_MESSAGE = "ready\n";

/** Says "ready" on `fd` and closes it; false when there was no FIFO there to tell. */
export function signalReady(fd: number | undefined): boolean {
  if (fd === undefined) return false;
  try {
    if (!fstatSync(fd).isFIFO()) return false;
  } catch {
    return false; // not open: no node listens
  }
  try {
    writeSync(fd, READY_MESSAGE);
    return true;
  } catch {
    return false; // the node stopped reading (it gave up, or polls instead)
  } finally {
    closeSync(fd);
  }
}
