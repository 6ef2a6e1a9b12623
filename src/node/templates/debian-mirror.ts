/**
 * The Debian mirror the machine's apt already uses (never a hard-coded host): the first
 * main-archive URI in /etc/apt/sources.list.d/*.sources (deb822) or sources.list files.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { SpaceError } from "../../core/errors.ts";

export function mirrorsFromDeb822(text: string): string[] {
  const out: string[] = [];
  for (const stanza of text.split(/\n\s*\n/)) {
    const types = /^Types:\s*(.+)$/im.exec(stanza)?.[1]?.split(/\s+/) ?? [];
    if (!types.includes("deb")) continue;
    const uris = /^URIs:\s*(.+)$/im.exec(stanza)?.[1]?.trim().split(/\s+/) ?? [];
    out.push(...uris);
  }
  return out;
}

export function mirrorsFromList(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*/, "").trim();
    const m = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)/.exec(line);
    if (m) out.push(m[1]!);
  }
  return out;
}

/** Main archive only: not security, not updates, not third-party repos. */
export function pickDebianMirror(uris: string[]): string | undefined {
  return uris.map((u) => u.replace(/\/+$/, "")).find((u) => /\/debian$/.test(u) && !/security|updates/.test(u));
}

export async function resolveDebianMirror(configured: string, aptDir = "/etc/apt"): Promise<string> {
  if (configured) return configured.replace(/\/+$/, "");
  const uris: string[] = [];
  const d = join(aptDir, "sources.list.d");
  const files = await readdir(d).catch(() => [] as string[]);
  for (const f of files.sort()) {
    if (f.endsWith(".sources")) uris.push(...mirrorsFromDeb822(await readFile(join(d, f), "utf8")));
  }
  uris.push(...mirrorsFromList(await readFile(join(aptDir, "sources.list"), "utf8").catch(() => "")));
  for (const f of files.sort()) {
    if (f.endsWith(".list")) uris.push(...mirrorsFromList(await readFile(join(d, f), "utf8")));
  }
  const m = pickDebianMirror(uris);
  if (!m) throw new SpaceError("failed_precondition", "no Debian mirror in the machine's apt sources; set SPACE_DEBIAN_MIRROR");
  return m;
}
