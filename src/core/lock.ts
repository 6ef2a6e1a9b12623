/**
 * An exclusive lock on a data directory: one `space up` per directory. The lock file
 * holds the owner's pid; a lock whose pid is gone is stale and taken over.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { SpaceError } from "./errors.ts";

export interface DirLock {
  release(): void;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

export function lockDataDir(dir: string): DirLock {
  const path = join(dir, "space.lock");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx", 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      let released = false;
      return {
        release() {
          if (released) return;
          released = true;
          try {
            unlinkSync(path);
          } catch {
            // already gone: nothing to release
          }
        },
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      const pid = Number(readFileSync(path, "utf8").trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) {
        throw new SpaceError(
          "failed_precondition",
          `data directory ${dir} is in use by another SPACE process (pid ${pid}); stop it first or choose another SPACE_DATA_DIR`,
        );
      }
      unlinkSync(path);
    }
  }
  throw new SpaceError("unavailable", `could not lock data directory ${dir}`);
}
