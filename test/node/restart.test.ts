// A node agent restart with sandboxes running reconciles without orphans: running ones are
// adopted (still reachable), dead ones become stopped (disk kept), half-created leftovers
// and unrecorded objects named after sandbox ids are reclaimed.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFile, stat, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { after, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { newExecutionId, newSandboxId } from "../../src/core/ids.ts";
import { newSnapshotId } from "../../src/store/snapshots.ts";
import { isTmpfs } from "../../src/core/tmpfs.ts";
import { hasRealEnvd, hostObjects, isRoot, spec, startTestNode, type TestNode } from "./helpers.ts";

const skip = isRoot ? false : "needs root (runc, btrfs, netns)";

describe("node restart", { skip, timeout: 300_000 }, () => {
  let node: TestNode | undefined;
  after(async () => node?.close());

  it("adopts running sandboxes, stops dead ones, reclaims orphans", async () => {
    const n1 = await startTestNode();
    node = n1;
    const sig = () => AbortSignal.timeout(60_000);
    const running = spec();
    const dies = spec();
    const stopped = spec();
    const runningAddr = (await n1.agent.manager!.create(running, sig())).address;
    await n1.agent.manager!.create(dies, sig());
    await n1.agent.manager!.create(stopped, sig());
    await n1.agent.manager!.stop(stopped.sandboxId, sig());
    const before = await hostObjects(n1, new Set([running.sandboxId, dies.sandboxId, stopped.sandboxId]));

    // The agent goes away (sandboxes keep running), and meanwhile:
    await n1.close({ keepDir: true, unmount: false });
    const runc = ["--root", join("/run/space-test", n1.dir.split("/").pop()!)];
    await exec("runc", [...runc, "kill", dies.sandboxId, "KILL"]); // a sandbox dies
    // a create that crashed halfway: a slot record and its netns, a disk, no sandbox record
    const ghost = newSandboxId();
    const slotsDir = join(n1.dir, "node", "slots");
    await exec("ip", ["netns", "add", ghost]);
    await writeFile(join(slotsDir, `${ghost}.json`), JSON.stringify({ owner: ghost, index: 150, address: n1.agent.slots!.range.address(150), gateway: n1.agent.slots!.range.gateway, prefix: 24, netns: ghost, netnsPath: `/run/netns/${ghost}`, hostVeth: `${n1.agent.slots!.vethPrefix}150`, policy: { allowInternetAccess: true } }));
    const orphanDisk = newSandboxId();
    await exec("btrfs", ["subvolume", "snapshot", join(n1.dir, "node", "cache", "templates", "base"), join(n1.dir, "node", "cache", "sandboxes", orphanDisk)]);

    const n2 = await startTestNode({ dir: n1.dir });
    node = n2;
    // Slot records and bundles live as long as the host's boot: on tmpfs mounts of the first
    // agent's, which its restart kept (the running sandbox's slot is adopted below).
    assert.equal(await isTmpfs(slotsDir), true);
    assert.equal(await isTmpfs(join(n1.dir, "node", "bundles")), true);
    const m = n2.agent.manager!;
    assert.equal(m.get(running.sandboxId).state, "running");
    assert.equal(m.get(running.sandboxId).address, runningAddr);
    assert.equal(m.get(dies.sandboxId).state, "stopped");
    assert.equal(m.get(stopped.sandboxId).state, "stopped");
    // adopted and still reachable through the proxy
    const health = await n2.agent.app.inject({ method: "GET", url: `/v1/sandboxes/${running.sandboxId}/proxy/49983/health`, headers: { authorization: "Bearer test-token" } });
    assert.equal(health.statusCode, 204);
    // orphans gone
    const netns = (await exec("ip", ["netns", "list"])).stdout;
    assert.doesNotMatch(netns, new RegExp(ghost));
    assert.doesNotMatch(netns, new RegExp(dies.sandboxId));
    assert.equal((await n2.agent.disks!.listSandboxDisks()).includes(orphanDisk), false);
    // a stopped sandbox starts again on the new agent
    assert.equal((await m.start(dies.sandboxId, AbortSignal.timeout(60_000))).state, "running");
    const after1 = await hostObjects(n2, new Set([running.sandboxId, dies.sandboxId, stopped.sandboxId, ghost, orphanDisk]));
    assert.equal(after1.containers, 2);
    assert.equal(after1.netns, 2);
    assert.equal(after1.veths, 2);
    assert.ok(before.containers === 2);
  });

  it("stopped right after a suspend's answer (its release, its kept slot may be pending): the restarted agent holds nothing of it, and restores it", { skip: hasRealEnvd ? false : "needs dist/envd" }, async () => {
    await node?.close();
    const n1 = await startTestNode({ realEnvd: true });
    node = n1;
    const sig = () => AbortSignal.timeout(120_000);
    const s = spec({ memoryMib: 256 });
    await n1.agent.manager!.create(s, sig());
    const d = await n1.agent.snapshots!.suspend(s.sandboxId, newSnapshotId(), { upload: false }, sig());
    await n1.close({ keepDir: true, unmount: false });

    const n2 = await startTestNode({ dir: n1.dir, realEnvd: true });
    node = n2;
    const held = await hostObjects(n2, new Set([s.sandboxId]));
    assert.deepEqual({ netns: held.netns, veths: held.veths, containers: held.containers }, { netns: 0, veths: 0, containers: 0 }, JSON.stringify(held));
    assert.equal((await n2.agent.disks!.listSandboxDisks()).includes(s.sandboxId), false, "its disk was released");
    assert.throws(() => n2.agent.manager!.get(s.sandboxId), /not on this node/);
    const back = await n2.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, d, sig());
    assert.equal(back.state, "running");
    assert.equal((await n2.agent.runtime!.execIn(s.sandboxId, ["true"], { timeoutMs: 30_000 })).exitCode, 0);
  });

  it("keeps the cache's boot marker while the cache stays mounted, and removes it with the mount", async () => {
    await node?.close();
    const n1 = await startTestNode();
    node = n1;
    const marker = join("/run/space", `node-cache-${createHash("sha256").update(resolve(join(n1.dir, "node", "cache.img"))).digest("hex").slice(0, 16)}.boot`);
    const bootId = (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
    assert.equal((await readFile(marker, "utf8")).trim(), bootId);
    await n1.close({ keepDir: true, unmount: false });
    assert.equal((await readFile(marker, "utf8")).trim(), bootId, "a restart on the mounted cache must not reformat it");
    const n2 = await startTestNode({ dir: n1.dir });
    node = n2;
    await n2.close();
    node = undefined;
    await assert.rejects(stat(marker), { code: "ENOENT" });
  });
});
