// `npm run build:dashboard` (and `npm run build`): the web dashboard (web/dashboard/,
// Preact + Vite) into dist/dashboard/, which the API serves at /dashboard
// (src/api/dashboard/static.ts). dist/dashboard/inputs.json lists what the build read and
// the newest mtime among it, so the API of a checkout rebuilds a stale build on its own.
// `--if-stale`: do nothing when that says the build is current.
import { build } from "vite";
import preact from "@preact/preset-vite";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(root, "web", "dashboard");
const out = join(root, "dist", "dashboard");

function inputs() {
  const files = [relative(root, join(root, "web")), "scripts/build-dashboard.mjs"];
  const walk = (d) => {
    files.push(relative(root, d));
    for (const e of readdirSync(d, { withFileTypes: true })) e.isDirectory() ? walk(join(d, e.name)) : files.push(relative(root, join(d, e.name)));
  };
  walk(src);
  return files.sort();
}

const files = inputs();
const newest = Math.max(...files.map((f) => statSync(join(root, f)).mtimeMs));
if (process.argv.includes("--if-stale")) {
  try {
    const built = JSON.parse(readFileSync(join(out, "inputs.json"), "utf8"));
    if (built.newest >= newest && files.every((f) => built.files.includes(f))) process.exit(0);
  } catch {
    // no build yet
  }
}

await build({
  root: src,
  base: "/dashboard/",
  configFile: false,
  logLevel: "warn",
  plugins: [preact()],
  build: { outDir: out, emptyOutDir: true, sourcemap: true, target: "es2022", chunkSizeWarningLimit: 1024 },
});
mkdirSync(out, { recursive: true });
writeFileSync(join(out, "inputs.json"), JSON.stringify({ files, newest }) + "\n");
console.log(`built ${out} (${files.length} inputs)`);
