/**
 * What envd does with its root privileges, and what it keeps from the sandbox's root
 * (native/privileges.c):
 *
 * - `makeUndumpable()`: envd (PID 1) holds the access token and the sandbox's env vars in
 *   memory. Non-dumpable, it cannot be ptraced (stopped, read) and its /proc/1/mem and
 *   /proc/1/environ cannot be opened by the sandbox's root, which lacks CAP_SYS_PTRACE.
 *   (The token never travels in envd's environment: it comes with `POST /init`.)
 * - `asUser(user, fn)`: file operations with the requesting user's rights, as E2B's envd
 *   does them. envd runs as root (so `sudo` and process users work); `fn` runs with the
 *   thread's filesystem uid/gid and groups set to the user's, so the kernel checks them:
 *   `files.read("/etc/shadow")` as `user` is EACCES like `cat` is, and what it creates is
 *   the user's. Chosen over checking modes by hand, which would re-implement ACLs,
 *   capabilities and search permission on every parent, and would race with the
 *   operation it guards. `fn` must be synchronous: only the main thread's credentials
 *   change (libuv's pool threads keep root's), so a stream is opened inside `fn` and read
 *   or written after it (an open descriptor keeps the rights it was opened with).
 */
import { SpaceError } from "../core/errors.ts";
import { loadAddon, type Log } from "./native-addon.ts";
import type { User, Users } from "./users.ts";

interface Addon {
  asUser<T>(uid: number, gid: number, groups: number[], fn: () => T): T;
  makeUndumpable(): boolean;
}

export class Privileges {
  readonly #addon: Addon | undefined;
  readonly #users: Users;
  /** envd is root: another user's rights must be taken before touching files for them. */
  readonly #root = process.getuid?.() === 0;

  constructor(addon: Addon | undefined, users: Users) {
    this.#addon = addon;
    this.#users = users;
  }

  /** PR_SET_DUMPABLE 0; false when it could not be set (no addon). */
  makeUndumpable(): boolean {
    return this.#addon?.makeUndumpable() ?? false;
  }

  /** Runs `fn` (synchronous file I/O) with `user`'s filesystem rights. */
  asUser<T>(user: User, fn: () => T): T {
    // Root needs no change; a non-root envd (the process runtime) has only its own rights anyway.
    if (user.uid === 0 || !this.#root) return fn();
    // Fail closed: without the addon the operation would run with root's rights.
    if (!this.#addon) throw new SpaceError("unavailable", `envd was built without privileges.node: file operations as "${user.name}" are refused`);
    return this.#addon.asUser(user.uid, user.gid, this.#users.groupIds(user), fn);
  }
}

/** `dir`: the bundle's directory (or src/envd in development, beside dist/envd). */
export function loadPrivileges(dir: string, users: Users, log: Log): Privileges {
  const addon = loadAddon<Addon>(dir, "privileges", log);
  if (!addon) log("no privileges addon: envd stays traceable and file operations as non-root users are refused");
  return new Privileges(addon, users);
}
