/**
 * File operations with the requesting user's rights, as E2B's envd does them: the
 * kernel checks them, not envd. envd runs as root (so `sudo` and process users work);
 * `FsCredentials.as(user, fn)` runs `fn` with the thread's filesystem uid/gid and
 * groups set to the user's (native/fs-credentials.c), so `files.read("/etc/shadow")` as
 * `user` is EACCES like `cat` is, and what it creates is the user's. Chosen over checking
 * modes by hand, which would have to re-implement ACLs, capabilities, search permission
 * on every parent and root-squash rules, and would race with the operation it guards.
 *
 * `fn` must be synchronous: only the main thread's credentials change (libuv's pool
 * threads keep root's), so a stream is opened inside `fn` and read or written after it
 * (an open descriptor keeps the rights it was opened with).
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { SpaceError } from "../core/errors.ts";
import type { User, Users } from "./users.ts";

interface Addon {
  asUser<T>(uid: number, gid: number, groups: number[], fn: () => T): T;
}

export class FsCredentials {
  readonly #addon: Addon | undefined;
  readonly #users: Users;
  /** envd is root: another user's rights must be taken before touching files for them. */
  readonly #root = process.getuid?.() === 0;

  constructor(addon: Addon | undefined, users: Users) {
    this.#addon = addon;
    this.#users = users;
  }

  /** Runs `fn` (synchronous file I/O) with `user`'s filesystem rights. */
  as<T>(user: User, fn: () => T): T {
    // Root needs no change; a non-root envd (the process runtime) has only its own rights anyway.
    if (user.uid === 0 || !this.#root) return fn();
    // Fail closed: without the addon the operation would run with root's rights.
    if (!this.#addon) throw new SpaceError("unavailable", `envd was built without fs-credentials.node: file operations as "${user.name}" are refused`);
    return this.#addon.asUser(user.uid, user.gid, this.#users.groupIds(user), fn);
  }
}

/** `dir`: the bundle's directory (or src/envd in development, beside dist/envd). */
export function loadFsCredentials(dir: string, users: Users, log: (msg: string, f?: Record<string, unknown>) => void): FsCredentials {
  const req = createRequire(join(dir, "envd"));
  for (const c of [join(dir, "fs-credentials.node"), join(dir, "..", "..", "dist", "envd", "fs-credentials.node")]) {
    if (!existsSync(c)) continue;
    try {
      return new FsCredentials(req(c) as Addon, users);
    } catch (e: unknown) {
      log("fs-credentials addon failed to load", { path: c, error: String(e) });
    }
  }
  log("no fs-credentials addon: file operations as non-root users are refused");
  return new FsCredentials(undefined, users);
}
