// `npm run build`: compiles the `space` CLI (src/, TypeScript) into JavaScript under
// dist/space/ so production runs it without a TypeScript loader (bin/space.mjs picks it up;
// `node dist/space/space.mjs <command>` runs it directly). dist/envd/ is envd's own bundle
// (scripts/build-envd.mjs) and stays apart.
//
// One esbuild bundle of src/ with npm packages left external (resolved from node_modules
// as installed, `npm ci --omit=dev` in production) and code splitting, so a dynamic import
// (the Kubernetes client, the controller, the node agent) still loads only when used.
// Every output file sits in dist/space/, two levels below the repository root as src/<x>/
// files are: the paths the code resolves from its own location keep working
// (`../../package.json`, the repository's .tools/ and dist/envd/), and the assets it reads
// beside itself are copied next to it (the migrations, the spawn server, the egress proxy's
// and spawn server's addons when build:envd built them).
//
// dist/space/inputs.json lists the sources the bundle was built from and the assets it
// copied: bin/space.mjs runs the compiled CLI only while none of them changed since (a
// stale build never hides an edit).
import { build } from "esbuild";
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "space");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

const result = await build({
  absWorkingDir: root,
  entryPoints: { main: "src/cli/main.ts" },
  outdir: out,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  splitting: true,
  packages: "external",
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "linked",
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
});

writeFileSync(join(out, "space.mjs"), 'import { main } from "./main.mjs";\nawait main(process.argv);\n');
cpSync(join(root, "src/store/migrations"), join(out, "migrations"), { recursive: true });
cpSync(join(root, "src/core/spawn-server.mjs"), join(out, "spawn-server.mjs"));
// The code-interpreter template's recipe reads its sources beside the module (its digest names the
// tarball a node offers): without them a compiled node offers no code-interpreter-v1.
cpSync(join(root, "src/node/templates/code-interpreter"), join(out, "code-interpreter"), { recursive: true });
for (const addon of ["original-dst.node", "spawn.node", "btrfs-ioctl.node"]) if (existsSync(join(root, "dist/node", addon))) cpSync(join(root, "dist/node", addon), join(out, addon));

// The copied assets count as inputs too; the migrations folder itself (its mtime) catches a new migration.
const assets = ["src/store/migrations", ...readdirSync(join(root, "src/store/migrations")).map((f) => `src/store/migrations/${f}`), "src/core/spawn-server.mjs", ...readdirSync(join(root, "src/node/templates/code-interpreter")).map((f) => `src/node/templates/code-interpreter/${f}`)];
const inputs = [...new Set([...Object.keys(result.metafile.inputs).filter((f) => f.startsWith("src/")), ...assets])].sort();
writeFileSync(join(out, "inputs.json"), JSON.stringify(inputs) + "\n");
const externals = new Set(Object.values(result.metafile.outputs).flatMap((o) => o.imports.filter((i) => i.external).map((i) => i.path)));
if (externals.has("tsx") || [...externals].some((p) => p.startsWith("tsx/"))) throw new Error("the compiled CLI imports tsx");
console.log(`built ${out}/space.mjs (${inputs.length} sources, ${Object.keys(result.metafile.outputs).filter((f) => f.endsWith(".mjs")).length} files)`);
