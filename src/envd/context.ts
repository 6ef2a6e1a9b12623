/**
 * Everything a handler needs, built once in main() (or by a test) and passed down.
 */
import { basicAuthUser } from "./request-auth.ts";
import type { EnvdState } from "./state.ts";
import type { User, Users } from "./users.ts";
import type { ProcessManager } from "./process/manager.ts";
import type { MetadataStore } from "./filesystem/metadata.ts";
import type { Watchers } from "./filesystem/watchers.ts";

export interface Envd {
  state: EnvdState;
  users: Users;
  processes: ProcessManager;
  metadata: MetadataStore;
  watchers: Watchers;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/**
 * The requesting user: explicit name (query `username` or Basic auth), else the default
 * user; a missing *default* user falls back to root so images without `user` still work.
 */
export function requestUser(envd: Envd, explicit: string | undefined): User {
  if (explicit) return envd.users.get(explicit);
  const u = envd.users.find(envd.state.defaultUser);
  if (u) return u;
  return envd.users.get("root");
}

export function userFromHeaders(envd: Envd, authorization: string | null | undefined): User {
  return requestUser(envd, basicAuthUser(authorization));
}
