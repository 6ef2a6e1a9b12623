#!/usr/bin/env node
// No two source files with the same name in neighbouring folders under src/: a folder and
// its subfolders, or two folders with the same parent. A newcomer (and a stack trace) then
// knows which `routes.ts` is meant. Exits 1 listing every collision; `npm run lint` runs it.
// Tests sit beside what they test, so `x.test.ts` collides only where `x.ts` does.
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";

const root = new URL("../src/", import.meta.url).pathname;
/** Names meant to repeat: a folder's entry point, a program's main. */
const ALLOWED = new Set(["index.ts", "main.ts"]);
const SOURCE = /\.(ts|mts|mjs|js|c)$/;

/** dir → its source file names and subfolders. */
function walk(dir, out = new Map()) {
  const entries = readdirSync(dir, { withFileTypes: true });
  out.set(dir, {
    files: entries.filter((e) => e.isFile() && SOURCE.test(e.name) && !e.name.includes(".test.")).map((e) => e.name),
    dirs: entries.filter((e) => e.isDirectory()).map((e) => join(dir, e.name)),
  });
  for (const d of out.get(dir).dirs) walk(d, out);
  return out;
}

const tree = walk(root);
const found = new Map();
for (const [dir, { dirs }] of tree) {
  // One neighbourhood: this folder and its direct subfolders (siblings of each other).
  const byName = new Map();
  for (const d of [dir, ...dirs]) {
    for (const f of tree.get(d).files) {
      if (ALLOWED.has(f)) continue;
      if (!byName.has(f)) byName.set(f, new Set());
      byName.get(f).add(relative(root, join(d, f)));
    }
  }
  for (const [name, paths] of byName) if (paths.size > 1) found.set([...paths].sort().join(" "), name);
}

if (found.size) {
  console.error(`same file name in neighbouring folders under src/ (${found.size}); rename to say what each is:`);
  for (const paths of [...found.keys()].sort()) console.error(`  ${paths}`);
  process.exit(1);
}
console.log("basenames: no two files with the same name in neighbouring folders");
