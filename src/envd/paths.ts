import { isAbsolute, resolve } from "node:path";
import { SpaceError } from "../core/errors.ts";
import type { User } from "./users.ts";

/**
 * Resolves a client path for `user`: `~` and `~/x` expand to the home, relative paths
 * resolve against it, `..` is normalised. envd's root is the sandbox's root, so the
 * result never leaves the sandbox. A NUL byte is the client's error (no file name holds
 * one; Node would throw its own TypeError, an internal error to the caller).
 */
export function resolveUserPath(p: string, user: User): string {
  if (p.includes("\0")) throw new SpaceError("invalid_argument", "path must not contain NUL bytes");
  if (p === "" || p === "~") return resolve(user.home);
  if (p.startsWith("~/")) return resolve(user.home, p.slice(2));
  if (isAbsolute(p)) return resolve(p);
  return resolve(user.home, p);
}
