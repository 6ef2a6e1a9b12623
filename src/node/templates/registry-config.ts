/**
 * The operator's registry settings, turned into what skopeo reads (pure; unit-tested):
 * a containers-registries.conf (v2) for insecure/plain-HTTP registries and mirrors, and a
 * containers-auth.json that adds one build's credentials to the operator's auth file.
 * The operator's lists are parsed with the config (core/registry-lists.ts).
 */
import type { RegistryAuth } from "../../contract/build-recipe.ts";

export interface RegistrySettings {
  /** Registries reached over plain HTTP or unverified TLS (`host[:port]`). */
  insecure: readonly string[];
  /** Registry → its mirrors, tried in order before the registry itself. */
  mirrors: Readonly<Record<string, readonly string[]>>;
}

const toml = (s: string) => JSON.stringify(s);

/** A registries.conf (v2): no short-name search, each insecure registry and each mirrored one as a [[registry]] table. */
export function registriesConf(s: RegistrySettings): string {
  const lines = ["# Written by the SPACE node agent (SPACE_REGISTRY_INSECURE, SPACE_REGISTRY_MIRRORS).", "unqualified-search-registries = []", 'short-name-mode = "disabled"'];
  const insecure = new Set(s.insecure);
  const hosts = new Set([...s.insecure, ...Object.keys(s.mirrors)]);
  for (const host of hosts) {
    lines.push("", "[[registry]]", `prefix = ${toml(host)}`, `location = ${toml(host)}`, `insecure = ${insecure.has(host)}`);
    for (const m of s.mirrors[host] ?? []) {
      const mirrorHost = m.split("/")[0]!;
      lines.push("", "[[registry.mirror]]", `location = ${toml(m)}`, `insecure = ${insecure.has(mirrorHost)}`);
    }
  }
  return `${lines.join("\n")}\n`;
}

interface AuthFile {
  auths?: Record<string, { auth?: string; [k: string]: unknown }>;
  [k: string]: unknown;
}

/**
 * The auth file of one pull: the operator's entries (if any) with `registry`'s replaced by
 * the build's own credentials when it brought some. Throws when the operator's file is not JSON.
 */
export function authFileFor(operatorFile: string | undefined, registry: string, auth: RegistryAuth | undefined): string {
  const base = operatorFile ? (JSON.parse(operatorFile) as AuthFile) : {};
  if (typeof base !== "object" || base === null || Array.isArray(base)) throw new Error("not a JSON object");
  const auths = { ...(base.auths ?? {}) };
  if (auth) {
    // docker.io's credentials live under its historical key too; the build's own replace both.
    const keys = registry === "docker.io" ? ["docker.io", "https://index.docker.io/v1/", "index.docker.io"] : [registry];
    for (const k of keys) delete auths[k];
    auths[registry] = { auth: Buffer.from(`${auth.username}:${auth.password}`).toString("base64") };
  }
  return JSON.stringify({ ...base, auths });
}
