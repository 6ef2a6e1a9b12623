/**
 * envd's N-API addons (native/*.c), built by scripts/build-envd.mjs beside the bundle.
 * They are resolved from the bundle's directory: in a startup snapshot `require` reaches
 * only what createRequire gives it.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

export type Log = (msg: string, f?: Record<string, unknown>) => void;

/** `dir`: the bundle's directory (or src/envd in development, beside dist/envd). Undefined when absent or unloadable. */
export function loadAddon<T>(dir: string, name: string, log: Log): T | undefined {
  const req = createRequire(join(dir, "envd"));
  for (const c of [join(dir, `${name}.node`), join(dir, "..", "..", "dist", "envd", `${name}.node`)]) {
    if (!existsSync(c)) continue;
    try {
      return req(c) as T;
    } catch (e: unknown) {
      log(`${name} addon failed to load`, { path: c, error: String(e) });
    }
  }
  return undefined;
}
