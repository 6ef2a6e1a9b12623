/**
 * Users and groups from the sandbox's own /etc/passwd and /etc/group (envd runs inside
 * the sandbox's mount namespace). Looked up by name: uids differ between rootfses.
 */
import { readFileSync, statSync } from "node:fs";
import { SpaceError } from "../core/errors.ts";

export interface User {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

interface Db {
  mtimeMs: number;
  byName: Map<string, User>;
  byUid: Map<number, User>;
  groupsByGid: Map<number, string>;
  /** user name → the gids of the groups that list it as a member. */
  memberOf: Map<string, number[]>;
}

export class Users {
  private passwd: Db | undefined;
  constructor(
    private readonly passwdPath = "/etc/passwd",
    private readonly groupPath = "/etc/group",
  ) {}

  private db(): Db {
    let mtimeMs = 0;
    try {
      mtimeMs = statSync(this.passwdPath).mtimeMs + statSync(this.groupPath).mtimeMs;
    } catch {
      /* missing files: empty db below */
    }
    if (this.passwd && this.passwd.mtimeMs === mtimeMs) return this.passwd;
    const byName = new Map<string, User>();
    const byUid = new Map<number, User>();
    const groupsByGid = new Map<number, string>();
    const memberOf = new Map<string, number[]>();
    for (const line of readLines(this.passwdPath)) {
      const f = line.split(":");
      if (f.length < 7) continue;
      const u: User = { name: f[0]!, uid: Number(f[2]), gid: Number(f[3]), home: f[5] || "/", shell: f[6] || "/bin/sh" };
      if (!Number.isInteger(u.uid) || !Number.isInteger(u.gid)) continue;
      if (!byName.has(u.name)) byName.set(u.name, u);
      if (!byUid.has(u.uid)) byUid.set(u.uid, u);
    }
    for (const line of readLines(this.groupPath)) {
      const f = line.split(":");
      if (f.length < 3) continue;
      const gid = Number(f[2]);
      if (!Number.isInteger(gid)) continue;
      if (!groupsByGid.has(gid)) groupsByGid.set(gid, f[0]!);
      for (const m of (f[3] ?? "").split(",").filter(Boolean)) memberOf.set(m, [...(memberOf.get(m) ?? []), gid]);
    }
    if (!byName.has("root")) {
      const root = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/sh" };
      byName.set("root", root);
      byUid.set(0, root);
    }
    this.passwd = { mtimeMs, byName, byUid, groupsByGid, memberOf };
    return this.passwd;
  }

  /** The user by name; `invalid_argument` naming it when absent. */
  get(name: string): User {
    const u = this.db().byName.get(name);
    if (!u) throw new SpaceError("invalid_argument", `user "${name}" does not exist in this sandbox`);
    return u;
  }

  find(name: string): User | undefined {
    return this.db().byName.get(name);
  }

  userName(uid: number): string {
    return this.db().byUid.get(uid)?.name ?? String(uid);
  }

  /** The user's groups as `id -G` lists them: its primary group, then those naming it. */
  groupIds(user: User): number[] {
    return [...new Set([user.gid, ...(this.db().memberOf.get(user.name) ?? [])])];
  }

  groupName(gid: number): string {
    return this.db().groupsByGid.get(gid) ?? String(gid);
  }
}

function readLines(path: string): string[] {
  try {
    return readFileSync(path, "utf8")
      .split("\n")
      .filter((l) => l && !l.startsWith("#"));
  } catch {
    return [];
  }
}
