/**
 * The operator's registry lists as config.ts parses them (pure; unit-tested): insecure
 * registries (`SPACE_REGISTRY_INSECURE`) and mirrors (`SPACE_REGISTRY_MIRRORS`). They
 * become a registries.conf on each node (node/templates/registry-config.ts).
 */
const HOST = /^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9a-fA-F:]+\](:\d{1,5})?$/;

/** `a:5000,b` → hosts; throws naming the bad entry. */
export function parseInsecure(v: string): string[] {
  const out = v
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);
  for (const h of out) if (!HOST.test(h)) throw new Error(`${JSON.stringify(h)} is not host[:port]`);
  return out;
}

/** `docker.io=mirror.local:5000|mirror2,quay.io=m3` → registry → mirrors; throws naming the bad entry. */
export function parseMirrors(v: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const entry of v.split(",").map((x) => x.trim()).filter(Boolean)) {
    const i = entry.indexOf("=");
    const registry = entry.slice(0, i).trim();
    const mirrors = entry
      .slice(i + 1)
      .split("|")
      .map((x) => x.trim())
      .filter(Boolean);
    if (i <= 0 || !HOST.test(registry) || !mirrors.length || !mirrors.every((m) => /^[A-Za-z0-9.:[\]-]+(\/[a-z0-9._/-]+)?$/.test(m))) {
      throw new Error(`${JSON.stringify(entry)} is not registry=mirror[|mirror…]`);
    }
    out[registry] = mirrors;
  }
  return out;
}
