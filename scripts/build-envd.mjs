// Bundles envd into one ESM file, dist/envd/envd.mjs, that runs with only a Node.js
// binary. node-pty (native) stays external; its JS and .node files are copied into
// dist/envd/node_modules/node-pty/ so `node /opt/space/envd/envd.mjs` resolves it.
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync, existsSync, writeFileSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "envd");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

await build({
  entryPoints: [join(root, "src/envd/main.ts")],
  outfile: join(out, "envd.mjs"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external: ["node-pty"],
  minify: false,
  sourcemap: false,
  legalComments: "none",
  banner: {
    js: [
      "import { createRequire as __spaceCreateRequire } from 'node:module';",
      "const require = __spaceCreateRequire(import.meta.url);",
    ].join("\n"),
  },
  logLevel: "warning",
});

// node-pty: package.json, lib/ (without tests and maps), the native addon.
const ptySrc = join(root, "node_modules", "node-pty");
const ptyDst = join(out, "node_modules", "node-pty");
mkdirSync(ptyDst, { recursive: true });
cpSync(join(ptySrc, "package.json"), join(ptyDst, "package.json"));
cpSync(join(ptySrc, "LICENSE"), join(ptyDst, "LICENSE"));
cpSync(join(ptySrc, "lib"), join(ptyDst, "lib"), {
  recursive: true,
  filter: (src) => !/\.test\.js$|\.map$/.test(src) && !/windows|conpty/i.test(src),
});
const native = join(ptySrc, "build", "Release");
if (!existsSync(join(native, "pty.node"))) throw new Error(`node-pty is not built: ${native}/pty.node missing`);
mkdirSync(join(ptyDst, "build", "Release"), { recursive: true });
cpSync(join(native, "pty.node"), join(ptyDst, "build", "Release", "pty.node"));
if (existsSync(join(native, "spawn-helper"))) cpSync(join(native, "spawn-helper"), join(ptyDst, "build", "Release", "spawn-helper"));

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
writeFileSync(join(out, "VERSION"), `envd 0.6.13 (space ${pkg.version})\n`);
console.log(`built ${out}/envd.mjs`);
