import { chown, mkdir } from "node:fs/promises";
import { dirname, relative, sep, join } from "node:path";
import type { User } from "../users.ts";

/**
 * mkdir -p as root, then chown every directory it created to `user` (envd runs as
 * root; files and dirs made on a user's behalf belong to that user).
 */
export async function mkdirpOwned(dir: string, user: User): Promise<void> {
  const first = await mkdir(dir, { recursive: true });
  if (first === undefined || user.uid === 0) return;
  let cur = first;
  await chown(cur, user.uid, user.gid);
  const rest = relative(first, dir);
  if (!rest) return;
  for (const part of rest.split(sep)) {
    cur = join(cur, part);
    await chown(cur, user.uid, user.gid);
  }
}

export async function ensureParentOwned(path: string, user: User): Promise<void> {
  await mkdirpOwned(dirname(path), user);
}
