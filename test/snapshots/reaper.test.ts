/**
 * The node's snapshot reaper on a real node (runc + CRIU + btrfs, filesystem blob store):
 * snapshot_reaper_reclaims_backed_fork_snapshot — a fork checkpoint published to the blob
 * store is freed under pressure and still restores (fetched again), while a copy that
 * exists only on the node is kept; copies inside the grace period and copies a restore
 * is using are never freed; copies unused past the idle limit go whatever the usage.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../src/core/log.ts";
import { newExecutionId, newSandboxId } from "../../src/core/ids.ts";
import { newSnapshotId } from "../../src/store/snapshots.ts";
import type { NodeSnapshots } from "../../src/node/snapshots/node-snapshots.ts";
import type { SnapshotDescriptor } from "../../src/contract/snapshot-descriptor.ts";
import { SnapshotReaper, type SnapshotReaperOptions } from "../../src/node/snapshots/reaper.ts";
import { hasRealEnvd, isRoot, sh, spec, startTestNode, type TestNode } from "../node/helpers.ts";

const skip = !isRoot ? "needs root" : !hasRealEnvd ? "needs dist/envd (npm run build:envd)" : false;
const HOUR = 3_600_000;

describe("node snapshot reaper", { skip, timeout: 10 * 60_000 }, () => {
  let node: TestNode;
  let snaps: NodeSnapshots;
  let blobDir = "";
  const src = spec();
  const sig = () => AbortSignal.timeout(300_000);
  const reaper = (o: Partial<SnapshotReaperOptions>) =>
    new SnapshotReaper(snaps, node.agent.disks!.cache.mountPath, {
      target: 0,
      intervalMs: HOUR,
      graceMs: 0,
      idleMs: 100 * HOUR,
      logger: createLogger("warn", "reaper-test"),
      ...o,
    });
  const fork = async (desc: SnapshotDescriptor) => {
    const sid = newSandboxId();
    const st = await snaps.restore({ ...src, sandboxId: sid, executionId: newExecutionId() }, desc, sig());
    assert.equal(st.state, "running");
    assert.equal((await sh(node, sid, "cat /home/user/mark")).stdout.trim(), "before-fork");
    await node.agent.manager!.kill(sid, sig());
  };

  before(async () => {
    blobDir = await mkdtemp(join(tmpdir(), "space-reaper-blobs-"));
    node = await startTestNode({
      realEnvd: true,
      env: { SPACE_BLOB_URL: blobDir },
      deps: { hostScope: { bridge: "spsnr0", nftTable: "space_snap_r", vethPrefix: "vsr", cgroupParent: "space-snap-r" } },
    });
    snaps = node.agent.snapshots!;
    assert.ok(snaps, "the node can checkpoint");
    await node.agent.manager!.create(src, sig());
    assert.equal((await sh(node, src.sandboxId, "echo before-fork > /home/user/mark")).exitCode, 0);
  });
  after(async () => {
    await node?.close();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  it("snapshot_reaper_reclaims_backed_fork_snapshot: frees the durable fork copy, keeps the node-only one; the freed one still restores", async () => {
    const backed = await snaps.capture(src.sandboxId, newSnapshotId(), { upload: true }, sig());
    const localOnly = await snaps.capture(src.sandboxId, newSnapshotId(), { upload: false }, sig());
    assert.equal(backed.parts.length, 2, "published");
    assert.equal(localOnly.parts.length, 0, "not published");

    assert.deepEqual((await reaper({ graceMs: HOUR }).sweep()).freed, [], "inside the grace period: nothing freed");
    assert.deepEqual((await reaper({ target: 1 }).sweep()).freed, [], "under the target and not idle: nothing freed");

    const r = await reaper({}).sweep();
    assert.deepEqual(r.freed, [{ snapshotId: backed.snapshotId, why: "over_target" }]);
    assert.equal(await snaps.hasLocal(backed.snapshotId), false, "the backed copy is gone from the node");
    assert.equal(await snaps.hasLocal(localOnly.snapshotId), true, "the node-only copy is kept (nothing else could restore it)");

    await fork(backed); // fetched again from the blob store
    await fork(localOnly);
  });

  it("never frees a copy a restore is using; frees it once the restore is done (idle rule)", async () => {
    const desc = await snaps.capture(src.sandboxId, newSnapshotId(), { upload: true }, sig());
    const sid = newSandboxId();
    const restoring = snaps.restore({ ...src, sandboxId: sid, executionId: newExecutionId() }, desc, sig());
    // A restore that failed early no longer uses the copy; say so rather than blame the reaper.
    let early: unknown;
    restoring.catch((e: unknown) => (early = e));
    // Usage is read without `btrfs subvolume sync`, which can outlast the whole restore under
    // load (the copy is then rightly free again); the sweep must see the restore in flight.
    const during = await reaper({ usage: async () => 1 }).sweep();
    assert.ok(!during.freed.some((f) => f.snapshotId === desc.snapshotId), `in use, not freed: ${JSON.stringify(during.freed)}${early ? `; the restore had already failed: ${String(early)}` : ""}`);
    assert.equal((await restoring).state, "running");
    assert.equal((await sh(node, sid, "cat /home/user/mark")).stdout.trim(), "before-fork");
    const idle = await reaper({ target: 1, idleMs: 0 }).sweep();
    assert.ok(idle.freed.some((f) => f.snapshotId === desc.snapshotId && f.why === "idle"), JSON.stringify(idle.freed));
    assert.equal(await snaps.hasLocal(desc.snapshotId), false);
    await node.agent.manager!.kill(sid, sig());
  });
});
