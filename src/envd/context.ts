/**
 * Everything a handler needs, built once in main() (or by a test) and passed down.
 */
import { basicAuthUser } from "./request-auth.ts";
import type { EnvdState } from "./state.ts";
import type { User, Users } from "./users.ts";
import type { ProcessManager } from "./process/manager.ts";
import type { FileMetadata } from "./filesystem/metadata.ts";
import type { Watchers } from "./filesystem/watchers.ts";
import type { LogLevel } from "../contract/envd-logs.ts";
import type { EnvdLogRing } from "./log-ring.ts";
import type { Privileges } from "./privileges.ts";

export interface Envd {
  state: EnvdState;
  users: Users;
  processes: ProcessManager;
  metadata: FileMetadata;
  watchers: Watchers;
  /** File operations with the requesting user's rights. */
  privileges: Privileges;
  /** A structured log line: to stderr and to `logs`, the ring the node pulls (default level info). */
  log: (msg: string, fields?: Record<string, unknown>, level?: LogLevel) => void;
  logs: EnvdLogRing;
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
