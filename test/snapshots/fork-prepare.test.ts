/**
 * A capture for forks (`restoreAs`), on real runc + CRIU + btrfs + network slots: each
 * fork's disk and network slot are made beside the dump and kept; a restore as that id
 * takes them (the same subvolume, the same slot) and runs from the capture's instant; one
 * never restored loses them after the keep; the node API refuses `restoreAs` it cannot use.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { newExecutionId, newSandboxId } from "../../src/core/ids.ts";
import { qgroupUsage, subvolumeId } from "../../src/node/disk/btrfs.ts";
import { newSnapshotId } from "../../src/store/snapshots.ts";
import { hasRealEnvd, hostObjects, isRoot, sh, spec, startTestNode, type TestNode } from "../node/helpers.ts";
import { waitFor } from "../support/wait.ts";

const skip = !isRoot ? "needs root" : !hasRealEnvd ? "needs dist/envd (npm run build:envd)" : false;
const sig = () => AbortSignal.timeout(300_000);
const KEEP_MS = 1500;

describe("a capture for forks prepares their disks and slots", { skip, timeout: 10 * 60_000 }, () => {
  let node: TestNode;
  const s = spec();
  const disk = (id: string) => node.agent.disks!.sandboxPath(id);
  const read = async (id: string) => (await sh(node, id, "cat /home/user/v")).stdout.trim();
  const auth = { authorization: "Bearer test-token" };

  before(async () => {
    node = await startTestNode({ realEnvd: true, env: { SPACE_NODE_SLOT_KEEP_MS: String(KEEP_MS) } });
    await node.agent.manager!.create(s, sig());
  });
  after(async () => {
    await node?.close();
  });

  it("the restore takes the fork's kept disk and slot and runs from the capture; an unused one is gone after the keep", async () => {
    await sh(node, s.sandboxId, "echo captured > /home/user/v");
    const [taken, unused] = [newSandboxId(), newSandboxId()];
    const snap = await node.agent.snapshots!.capture(s.sandboxId, newSnapshotId(), { upload: false, restoreAs: [taken, unused] }, sig());
    await waitFor(() => (existsSync(disk(taken)) && existsSync(disk(unused)) && node.agent.slots!.get(taken)) || undefined, "both forks' disks and slots made", 30_000);
    const made = await subvolumeId(disk(taken));
    const address = node.agent.slots!.get(taken)!.address;
    await sh(node, s.sandboxId, "echo later > /home/user/v");

    const st = await node.agent.snapshots!.restore({ ...s, sandboxId: taken, executionId: newExecutionId() }, snap, sig());
    assert.equal(st.state, "running");
    assert.equal(await subvolumeId(disk(taken)), made, "the kept subvolume, not a new snapshot");
    assert.equal(node.agent.slots!.get(taken)?.address, address, "the kept slot");
    assert.equal(await read(taken), "captured", "the fork's disk is of the capture's instant");
    assert.equal(await read(s.sandboxId), "later", "the source keeps running, its writes its own");
    // Its limit came with it: as that of a restore the capture did not prepare.
    const plain = newSandboxId();
    await node.agent.snapshots!.restore({ ...s, sandboxId: plain, executionId: newExecutionId() }, snap, sig());
    const limit = (await qgroupUsage(disk(taken)))?.limitBytes;
    assert.ok(limit, "the prepared disk has a limit");
    assert.equal(limit, (await qgroupUsage(disk(plain)))?.limitBytes);
    await node.agent.manager!.kill(plain, sig());

    await waitFor(async () => (!existsSync(disk(unused)) && !node.agent.slots!.get(unused) && (await hostObjects(node, new Set([unused]))).netns === 0) || undefined, "the unused fork's disk and slot released after the keep", KEEP_MS + 20_000);
    await node.agent.manager!.kill(taken, sig());
    await node.agent.snapshots!.dropLocal(snap.snapshotId);
  });

  it("the node API refuses restoreAs on a suspend, and ids that are not sandbox ids, naming the field", async () => {
    const call = (verb: string, body: object) => node.agent.app.inject({ method: "POST", url: `/v1/sandboxes/${s.sandboxId}/${verb}`, headers: auth, payload: body });
    const onSuspend = await call("suspend", { snapshotId: newSnapshotId(), restoreAs: [newSandboxId()] });
    assert.equal(onSuspend.statusCode, 400);
    assert.match(onSuspend.body, /restoreAs/);
    const badId = await call("capture", { snapshotId: newSnapshotId(), restoreAs: ["../etc"] });
    assert.equal(badId.statusCode, 400);
    assert.match(badId.body, /restoreAs/);
    assert.equal(node.agent.manager!.get(s.sandboxId).state, "running", "nothing was captured");
  });
});
