/**
 * A suspended sandbox's disk kept for a restore here (SPACE_NODE_SLOT_KEEP_MS), on real
 * runc + CRIU + btrfs: a restore of that snapshot takes the disk back (the same subvolume, no
 * new snapshot); a restore of another snapshot of the id never gets it (the kept disk is
 * released and the snapshot's own disk made); after the keep the disk is gone and a restore
 * makes it from the snapshot.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { newExecutionId } from "../../src/core/ids.ts";
import { subvolumeId } from "../../src/node/disk/btrfs.ts";
import { newSnapshotId } from "../../src/store/snapshots.ts";
import { hasRealEnvd, isRoot, sh, spec, startTestNode, type TestNode } from "../node/helpers.ts";
import { waitFor } from "../support/wait.ts";

const skip = !isRoot ? "needs root" : !hasRealEnvd ? "needs dist/envd (npm run build:envd)" : false;
const sig = () => AbortSignal.timeout(300_000);
const KEEP_MS = 1500;

describe("a suspended sandbox's disk kept for a restore here", { skip, timeout: 10 * 60_000 }, () => {
  let node: TestNode;
  const s = spec();
  const id = s.sandboxId;
  const disk = () => node.agent.disks!.sandboxPath(id);
  const suspend = () => node.agent.snapshots!.suspend(id, newSnapshotId(), { upload: false }, sig());
  const read = async () => (await sh(node, id, "cat /home/user/v")).stdout.trim();

  before(async () => {
    node = await startTestNode({ realEnvd: true, env: { SPACE_NODE_SLOT_KEEP_MS: String(KEEP_MS) } });
    await node.agent.manager!.create(s, sig());
  });
  after(async () => {
    await node?.close();
  });

  it("a restore of the snapshot at once takes the same disk back; one of an older snapshot gets that snapshot's disk", async () => {
    await sh(node, id, "echo 1 > /home/user/v");
    const before = await subvolumeId(disk());
    const snap1 = await suspend();
    assert.ok(existsSync(disk()), "the disk stays after the suspend");
    await node.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, snap1, sig());
    assert.equal(await subvolumeId(disk()), before, "the kept subvolume, not a new snapshot");
    assert.equal(await read(), "1");

    await sh(node, id, "echo 2 > /home/user/v");
    const kept = await subvolumeId(disk());
    await suspend();
    // The disk kept now equals the second snapshot: restoring the first must not use it.
    await node.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, snap1, sig());
    assert.notEqual(await subvolumeId(disk()), kept);
    assert.equal(await read(), "1");
    await node.agent.snapshots!.dropLocal(snap1.snapshotId);
  });

  it("after the keep the disk is released, and a restore makes it from the snapshot", async () => {
    await sh(node, id, "echo 3 > /home/user/v");
    const kept = await subvolumeId(disk());
    const snap = await suspend();
    await waitFor(() => !existsSync(disk()) || undefined, "the kept disk released after the keep", KEEP_MS + 10_000);
    await node.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, snap, sig());
    assert.notEqual(await subvolumeId(disk()), kept);
    assert.equal(await read(), "3");
    await node.agent.snapshots!.dropLocal(snap.snapshotId);
  });
});
