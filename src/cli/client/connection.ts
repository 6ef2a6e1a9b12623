/**
 * The one API-URL/credential convention of every client command (`space sandbox …`,
 * `space tenant …`, `space node list`, …): a flag, then a variable, then what the local
 * `space up` wrote to its data directory (`secrets.json`, `endpoints.json`), then a
 * default. Each value keeps where it came from, so `space config` can say, and an error
 * can name the flag or variable that fixes it.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import type { Config } from "../../core/config.ts";

export type Source = "flag" | "env" | "data-dir" | "default" | "unset";

export interface Resolved {
  value: string;
  source: Source;
  /** The flag, variable or file it came from (e.g. `E2B_API_URL`, `~/.space/secrets.json`). */
  origin: string;
}

export interface ClientFlags {
  apiUrl?: string | undefined;
  sandboxUrl?: string | undefined;
  apiKey?: string | undefined;
  adminToken?: string | undefined;
}

export interface Connection {
  apiUrl: Resolved;
  sandboxUrl: Resolved;
  apiKey: Resolved;
  adminToken: Resolved;
  dataDir: string;
}

/** What `space up` writes next to its secrets: where its API and gateway listen. */
export const Endpoints = z.object({ apiUrl: z.string().min(1), sandboxUrl: z.string().min(1) });
export type Endpoints = z.infer<typeof Endpoints>;
export const ENDPOINTS_FILE = "endpoints.json";

const LocalSecrets = z.object({ adminToken: z.string().optional(), apiKey: z.string().optional() });

function readJson<T>(path: string, schema: z.ZodType<T>): T | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const r = schema.safeParse(JSON.parse(readFileSync(path, "utf8")));
    return r.success ? r.data : undefined;
  } catch {
    // Unreadable (another user's 0600 file) or damaged: the next source applies.
    return undefined;
  }
}

function first(candidates: Array<[string | undefined, Source, string]>, fallback: Resolved): Resolved {
  for (const [value, source, origin] of candidates) if (value) return { value, source, origin };
  return fallback;
}

/**
 * Resolves the connection. `config` is the parsed SPACE_* configuration (SPACE_API_URL,
 * SPACE_SANDBOX_URL, SPACE_ADMIN_TOKEN, SPACE_DATA_DIR); `env` supplies the E2B_* names.
 */
export function resolveConnection(flags: ClientFlags, config: Config, env: Record<string, string | undefined>): Connection {
  const dataDir = config.SPACE_DATA_DIR;
  const endpointsPath = join(dataDir, ENDPOINTS_FILE);
  const secretsPath = join(dataDir, "secrets.json");
  const endpoints = readJson(endpointsPath, Endpoints);
  const secrets = readJson(secretsPath, LocalSecrets);
  return {
    dataDir,
    apiUrl: first(
      [
        [flags.apiUrl, "flag", "--api-url"],
        [config.SPACE_API_URL, "env", "SPACE_API_URL"],
        [env.E2B_API_URL, "env", "E2B_API_URL"],
        [endpoints?.apiUrl, "data-dir", endpointsPath],
      ],
      { value: `http://${config.SPACE_API_HOST}:${config.SPACE_API_PORT}`, source: "default", origin: "SPACE_API_HOST:SPACE_API_PORT" },
    ),
    sandboxUrl: first(
      [
        [flags.sandboxUrl, "flag", "--sandbox-url"],
        [config.SPACE_SANDBOX_URL, "env", "SPACE_SANDBOX_URL"],
        [env.E2B_SANDBOX_URL, "env", "E2B_SANDBOX_URL"],
        [endpoints?.sandboxUrl, "data-dir", endpointsPath],
      ],
      { value: `http://${config.SPACE_API_HOST}:${config.SPACE_GATEWAY_PORT}`, source: "default", origin: "SPACE_API_HOST:SPACE_GATEWAY_PORT" },
    ),
    apiKey: first(
      [
        [flags.apiKey, "flag", "--api-key"],
        [env.E2B_API_KEY, "env", "E2B_API_KEY"],
        [secrets?.apiKey, "data-dir", secretsPath],
      ],
      { value: "", source: "unset", origin: "" },
    ),
    adminToken: first(
      [
        [flags.adminToken, "flag", "--admin-token"],
        [config.SPACE_ADMIN_TOKEN, "env", "SPACE_ADMIN_TOKEN"],
        [secrets?.adminToken, "data-dir", secretsPath],
      ],
      { value: "", source: "unset", origin: "" },
    ),
  };
}

/** `spa_…` → `spa_…wxyz`: enough to tell two secrets apart, never enough to use one. */
export function maskSecret(value: string): string {
  if (!value) return "";
  if (value.length <= 8) return "****";
  const prefix = /^[a-z0-9]{2,4}_/.exec(value)?.[0] ?? "";
  return `${prefix}****${value.slice(-4)}`;
}
