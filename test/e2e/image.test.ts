/**
 * The OCI image (scripts/image/build.sh): built from Debian packages and npm on this
 * machine (cached by the digest of its inputs), run with podman: `space version`, the
 * tools a node needs, nothing it does not, and the control plane's way of running it (a
 * non-root user on a read-only root file system) applying the migrations.
 */
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

const skip = process.getuid?.() !== 0 ? "needs root (mmdebstrap, podman)" : false;
const VERSION = (JSON.parse(readFileSync("package.json", "utf8")) as { version: string }).version;

const sh = (cmd: string, args: string[], timeout = 60_000) => {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout });
  assert.equal(r.status, 0, `${cmd} ${args.join(" ")}: ${r.stdout}\n${r.stderr}`);
  return r.stdout;
};
// As the build's own check: podman's default rlimits can exceed what this host allows.
const limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"];

describe("the OCI image", { skip, timeout: 30 * 60_000 }, () => {
  let ref = "";
  const inImage = (args: string[], opts: string[] = []) => sh("podman", ["run", "--rm", "--network=none", ...limits, ...opts, ref, ...args]);

  before(() => {
    ref = sh("bash", ["scripts/image/build.sh"], 25 * 60_000).trim().split("\n").pop()!;
    assert.match(ref, /^localhost\/space:[0-9a-f]{16}$/);
  });

  test("podman run <image> space version prints this checkout's version", () => {
    assert.equal(inImage(["space", "version"]).trim(), `space ${VERSION}`);
  });

  test("three layers (Debian, Node.js, SPACE); the compiled CLI is what runs", () => {
    assert.equal(sh("podman", ["image", "inspect", "--format", "{{len .RootFS.Layers}}", ref]).trim(), "3");
    const out = inImage(["sh", "-c", "readlink -f /usr/local/bin/space; ls /opt/space; ls /opt/space/dist; test -e /opt/space/node_modules/tsx && echo has-tsx; test -e /opt/space/node_modules/esbuild && echo has-esbuild; true"]);
    assert.match(out, /^\/opt\/space\/bin\/space\.mjs$/m);
    assert.doesNotMatch(out, /^src$/m, "no sources: bin/space.mjs always runs dist/space");
    assert.match(out, /^space$/m);
    assert.match(out, /^envd$/m);
    assert.doesNotMatch(out, /has-tsx|has-esbuild/);
  });

  test("what a node needs is there: runc, crun, CRIU 4.1.1, btrfs-progs, nftables, iproute2, skopeo, umoci, debootstrap, bsdtar, Node.js 20", () => {
    const out = inImage(["sh", "-c", "runc --version | head -1; crun --version | head -1; /opt/space/.tools/criu/criu --version | head -1; btrfs --version; nft --version; ip -V; skopeo --version; umoci --version; for c in debootstrap mkfs.btrfs losetup bsdtar; do command -v $c; done; node --version; test -x /opt/space/.tools/bin/btrfs-squota && echo squota"]);
    for (const want of [/^runc version/m, /^crun version/m, /^Version: 4\.1\.1/m, /^btrfs-progs v/m, /^nftables v/m, /^ip utility/m, /^skopeo version/m, /^umoci version/m, /debootstrap$/m, /mkfs\.btrfs$/m, /losetup$/m, /bsdtar$/m, /^v20\./m, /^squota$/m])
      assert.match(out, want);
  });

  test("nothing the processes do not read: no documentation beyond copyright notices, no CNI plugins, no package manager caches", () => {
    const out = inImage(["sh", "-c", "find /usr/share/doc -type f ! -name copyright | head -5; find /usr/share/man /usr/lib/cni -type f | head -5; find /var/cache/apt /var/lib/apt/lists -type f ! -name lock | head -5"]);
    assert.equal(out.trim(), "");
  });

  test("as the chart runs the control plane (uid 10001, read-only root, a /tmp volume), space migrate applies the migrations", () => {
    const out = inImage(["space", "migrate"], ["--user", "10001:10001", "--read-only", "--tmpfs", "/tmp", "-e", "SPACE_DATA_DIR=/tmp/space", "-e", "SPACE_LOG_LEVEL=warn"]);
    assert.match(out, /^schema version \d+ \(applied 1, 2,/);
  });
});
