#!/usr/bin/env node
// The one `space` binary. Runs the compiled CLI (dist/space, `npm run build`) when it is
// there and no source it was built from changed since (an image ships no src/: always
// compiled); otherwise registers the TypeScript loader (tsx, a dev dependency) and runs
// src/ as it is.
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const compiled = join(root, "dist", "space", "space.mjs");

function compiledIsCurrent() {
  if (!existsSync(compiled)) return false;
  if (!existsSync(join(root, "src"))) return true;
  const built = statSync(compiled).mtimeMs;
  const inputs = JSON.parse(readFileSync(join(root, "dist", "space", "inputs.json"), "utf8"));
  return inputs.every((f) => {
    const p = join(root, f);
    return existsSync(p) && statSync(p).mtimeMs <= built;
  });
}

if (compiledIsCurrent()) {
  await import(pathToFileURL(compiled).href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  const { main } = await import("../src/cli/main.ts");
  await main(process.argv);
}
