/**
 * The node's native addons (dist/node/<name>.node from `npm run build:envd`, copied beside
 * the bundle by `npm run build`): where they are looked for, and loading one.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

/** Beside the bundle (dist/space), else the build's output (running from src/). */
export function addonCandidates(name: string): string[] {
  const here = import.meta.dirname;
  return [join(here, `${name}.node`), join(here, "..", "..", "dist", "node", `${name}.node`)];
}

/** The addon `name`, or undefined when it is not built. */
export function loadNodeAddon<T>(name: string): T | undefined {
  const file = addonCandidates(name).find((f) => existsSync(f));
  return file ? (createRequire(import.meta.url)(file) as T) : undefined;
}
