/**
 * The mutable part of envd's configuration: `POST /init` replaces env vars, the access
 * token, the default user and workdir (at start and after a restore).
 */
import type { EnvdConfig } from "./envd-config.ts";

export class EnvdState {
  envVars: Record<string, string>;
  accessToken: string | undefined;
  defaultUser: string;
  defaultWorkdir: string | undefined;
  readonly startedAtMs = Date.now();

  constructor(cfg: EnvdConfig) {
    this.envVars = { ...cfg.envVars };
    this.accessToken = cfg.accessToken;
    this.defaultUser = cfg.defaultUser;
    this.defaultWorkdir = cfg.defaultWorkdir;
  }
}
