/**
 * envd's command line. envd runs as the sandbox's PID 1 and takes no config file: the
 * node passes flags, and the sandbox's env vars arrive as envd's own environment.
 */
import { parseArgs } from "node:util";
import { readFileSync } from "node:fs";
import { DEFAULT_LOG_ENTRIES } from "./log-ring.ts";

/** Reported to the SDK; >= 0.6.4 unlocks every SDK feature (e2b-wire.md §4). */
export const ENVD_VERSION = "0.6.13";
export const DEFAULT_PORT = 49983;

export interface EnvdConfig {
  port: number;
  host: string;
  defaultUser: string;
  /** Working directory for processes that name none; undefined = the user's home. */
  defaultWorkdir: string | undefined;
  accessToken: string | undefined;
  /** Default env for every process (envd's environment minus its own SPACE_ENVD_* knobs). */
  envVars: Record<string, string>;
  /** Bound of envd's log ring (log-ring.ts); the node passes SPACE_SANDBOX_LOG_ENTRIES. */
  logEntries: number;
  /** The fd of the node's readiness FIFO (SPACE_ENVD_READY_FD, ready-signal.ts); undefined = none. */
  readyFd: number | undefined;
}

export function parseConfig(argv: string[], env: NodeJS.ProcessEnv): EnvdConfig {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: "string" },
      host: { type: "string" },
      "default-user": { type: "string" },
      "default-workdir": { type: "string" },
      "access-token-file": { type: "string" },
    },
    strict: true,
    allowPositionals: false,
  });
  const port = Number(values.port ?? env.SPACE_ENVD_PORT ?? DEFAULT_PORT);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`invalid --port ${String(values.port)}`);
  let accessToken: string | undefined;
  const tokenFile = values["access-token-file"] ?? env.SPACE_ENVD_ACCESS_TOKEN_FILE;
  if (tokenFile) accessToken = readFileSync(tokenFile, "utf8").trim() || undefined;
  const logEntries = Number(env.SPACE_ENVD_LOG_ENTRIES ?? DEFAULT_LOG_ENTRIES);
  const envVars: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && !k.startsWith("SPACE_ENVD_")) envVars[k] = v;
  return {
    port,
    host: values.host ?? env.SPACE_ENVD_HOST ?? "0.0.0.0",
    defaultUser: values["default-user"] ?? env.SPACE_ENVD_DEFAULT_USER ?? "user",
    defaultWorkdir: values["default-workdir"] ?? env.SPACE_ENVD_DEFAULT_WORKDIR,
    accessToken,
    envVars,
    logEntries: Number.isInteger(logEntries) && logEntries > 0 ? logEntries : DEFAULT_LOG_ENTRIES,
    readyFd: readyFdOf(env.SPACE_ENVD_READY_FD),
  };
}

/** Only fds above stdio: 0-2 are never the node's FIFO. */
function readyFdOf(v: string | undefined): number | undefined {
  const fd = Number(v);
  return v && Number.isInteger(fd) && fd > 2 ? fd : undefined;
}
