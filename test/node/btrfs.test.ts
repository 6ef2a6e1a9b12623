// The btrfs operations of a create (snapshot, qgroup limit) on a real btrfs: through the
// ioctl addon when it is built (as CI builds it), else the CLI; same results, same errors.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { SpaceError } from "../../src/core/errors.ts";
import { qgroupLimit, qgroupUsage, quotaEnable, snapshot, subvolumeCreate, subvolumeId } from "../../src/node/disk/btrfs.ts";
import { REPO_DIR } from "../../src/node/agent.ts";
import { isRoot } from "./helpers.ts";

describe("btrfs snapshot, qgroup limit and subvolume id", { skip: !isRoot && "needs root (a loop-mounted btrfs)" }, () => {
  let dir = "";
  let mnt = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "space-btrfs-"));
    mnt = join(dir, "mnt");
    const image = join(dir, "image");
    await exec("truncate", ["-s", "256M", image]);
    await exec("mkfs.btrfs", ["-q", image]);
    await exec("mkdir", [mnt]);
    await exec("mount", ["-o", "loop", image, mnt]);
    await quotaEnable(mnt);
  });
  after(async () => {
    await exec("umount", [mnt], { allowFailure: true });
    await rm(dir, { recursive: true, force: true });
  });

  it("the ioctl addon is built (npm run build:envd)", () => {
    assert.ok(existsSync(join(REPO_DIR, "dist", "node", "btrfs-ioctl.node")));
  });

  it("snapshots a subvolume with its files, and refuses an existing name or a missing source", async () => {
    const src = join(mnt, "template");
    await subvolumeCreate(src);
    await writeFile(join(src, "file"), "content");
    await snapshot(src, join(mnt, "sandbox"));
    assert.equal(await readFile(join(mnt, "sandbox", "file"), "utf8"), "content");
    assert.match((await exec("btrfs", ["subvolume", "show", join(mnt, "sandbox")])).stdout, /Parent UUID:\s+[0-9a-f-]{36}/);
    await writeFile(join(mnt, "sandbox", "file"), "changed");
    assert.equal(await readFile(join(src, "file"), "utf8"), "content", "the snapshot shares the source's files");
    await assert.rejects(snapshot(src, join(mnt, "sandbox")), (e: unknown) => e instanceof SpaceError && e.code === "already_exists" && e.message.includes(join(mnt, "sandbox")));
    await assert.rejects(snapshot(join(mnt, "missing"), join(mnt, "other")), (e: unknown) => e instanceof SpaceError && e.code === "not_found");
  });

  it("limits a subvolume's referenced bytes, and the limit holds", async () => {
    const path = join(mnt, "limited");
    await subvolumeCreate(path);
    await qgroupLimit(path, 8);
    assert.equal((await qgroupUsage(path))?.limitBytes, 8 * 1024 * 1024);
    const r = await exec("dd", ["if=/dev/zero", `of=${join(path, "big")}`, "bs=1M", "count=32", "conv=fsync"], { allowFailure: true });
    assert.notEqual(r.exitCode, 0);
    assert.match(r.stderr, /quota|No space/i);
    await assert.rejects(qgroupLimit(join(mnt, "missing"), 8), (e: unknown) => e instanceof SpaceError && e.code === "not_found");
  });

  it("names a subvolume's id as `btrfs inspect-internal rootid` does, and refuses a missing path", async () => {
    const path = join(mnt, "identified");
    await subvolumeCreate(path);
    const cli = Number((await exec("btrfs", ["inspect-internal", "rootid", path])).stdout.trim());
    assert.ok(cli > 255);
    assert.equal(await subvolumeId(path), cli);
    assert.equal(await subvolumeId(mnt), 5, "the top-level subvolume");
    await assert.rejects(subvolumeId(join(mnt, "missing")), (e: unknown) => e instanceof SpaceError && e.code === "not_found");
  });
});
