// Bundles envd into one ESM file, dist/envd/envd.mjs, that runs with only a Node.js
// binary. node-pty (native) stays external; its JS and .node files are copied into
// dist/envd/node_modules/node-pty/ so `node /opt/space/envd/envd.mjs` resolves it.
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync, existsSync, writeFileSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawn, spawnSync } from "node:child_process";

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
  inject: [join(root, "src/envd/headers.ts")],
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
if (existsSync(join(native, "spawn-helper")))
  cpSync(join(native, "spawn-helper"), join(ptyDst, "build", "Release", "spawn-helper"));

// envd's N-API addons (any Node >= the headers' version loads them): the zombie reaper,
// file metadata as user.e2b.* extended attributes (src/envd/filesystem/metadata.ts),
// envd undumpable and file operations with the requesting user's rights
// (src/envd/privileges.ts), commands started without fork (src/envd/process/spawner.ts);
// and the node agent's: SO_ORIGINAL_DST for its egress proxy (src/node/network/egress-proxy.ts),
// commands started without fork for its spawn server (src/core/spawn-server.mjs) and the
// btrfs snapshot and qgroup limit of a create as ioctls (src/node/disk/btrfs.ts).
const nodeInclude = [join(dirname(process.execPath), "..", "include", "node"), "/usr/include/node"].find((d) =>
  existsSync(join(d, "node_api.h")),
);
const cc = spawnSync("sh", ["-c", "command -v cc || command -v gcc"], { encoding: "utf8" }).stdout.trim();
if (cc && nodeInclude) {
  mkdirSync(join(root, "dist", "node"), { recursive: true });
  const addons = [
    ["reaper", join(root, "src/envd/native/reaper.c"), out],
    ["xattr", join(root, "src/envd/native/xattr.c"), out],
    ["privileges", join(root, "src/envd/native/privileges.c"), out],
    ["spawn", join(root, "src/core/native/spawn.c"), out],
    ["original_dst", join(root, "src/node/network/native/original-dst.c"), join(root, "dist", "node"), "original-dst"],
    ["btrfs_ioctl", join(root, "src/node/disk/native/btrfs-ioctl.c"), join(root, "dist", "node"), "btrfs-ioctl"],
    ["spawn", join(root, "src/core/native/spawn.c"), join(root, "dist", "node")],
  ];
  for (const [name, src, dir, file = name] of addons) {
    const r = spawnSync(cc, ["-O2", "-shared", "-fPIC", `-DNODE_GYP_MODULE_NAME=${name}`, `-I${nodeInclude}`, "-o", join(dir, `${file}.node`), src], {
      stdio: "inherit",
    });
    if (r.status !== 0) throw new Error(`building ${file}.node failed`);
  }
} else {
  console.warn("warning: no C compiler or node headers; envd ships without its addons (no zombie reaper, no file metadata, commands through fork), the node without its egress proxy addon");
}

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
writeFileSync(join(out, "VERSION"), `envd 0.6.13 (space ${pkg.version})\n`);
console.log(`built ${out}/envd.mjs`);

// A V8 startup snapshot of envd (src/envd/snapshot.ts): a sandbox's envd then starts
// without compiling the bundle. It only loads into the Node.js that built it, so the
// version is recorded beside it (src/node/sandboxes/envd-launch.ts checks it).
const snapshotEntry = join(out, "envd-snapshot.cjs");
await build({
  entryPoints: [join(root, "src/envd/snapshot.ts")],
  outfile: snapshotEntry,
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["node-pty"],
  inject: [join(root, "src/envd/headers.ts")],
  // A smaller heap to deserialize (the source text is part of it); names are kept.
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: false,
  legalComments: "none",
  logLevel: "warning",
});
const blob = join(out, "envd.blob");
// A clean environment: NODE_OPTIONS (e.g. --import tsx) must not end up in the snapshot.
const cleanEnv = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
const snap = spawnSync(process.execPath, ["--snapshot-blob", blob, "--build-snapshot", snapshotEntry], { encoding: "utf8", env: cleanEnv });
rmSync(snapshotEntry);
// Node warns that some built-ins are "not yet fully verified" in snapshots; the smoke test below is the check.
if (snap.status !== 0) throw new Error(`building the envd snapshot failed (exit ${snap.status}): ${snap.stderr.slice(-2000)}`);
// Smoke test: the snapshot starts envd and it listens.
const smokeErr = await new Promise((resolve) => {
  const child = spawn(process.execPath, ["--snapshot-blob", blob, "--", "--port", "0", "--host", "127.0.0.1"], {
    env: cleanEnv,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let err = "";
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  child.stderr.on("data", (d) => {
    err += d;
    if (err.includes('"msg":"listening"')) child.kill("SIGKILL");
  });
  child.on("close", () => {
    clearTimeout(timer);
    resolve(err.includes('"msg":"listening"') ? undefined : err.slice(-2000) || "no output");
  });
});
if (smokeErr) throw new Error(`the envd snapshot does not start: ${smokeErr}`);
writeFileSync(`${blob}.json`, JSON.stringify({ node: process.version, arch: process.arch }) + "\n");
console.log(`built ${blob} (node ${process.version})`);
