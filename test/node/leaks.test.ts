// 100 create/kill cycles, including creates that fail halfway, leave nothing behind:
// mounts, netns, veths, cgroups, nft rules, subvolumes, qgroups, containers.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { hostObjects, isRoot, spec, startTestNode, waitFor, type TestNode } from "./helpers.ts";

const skip = isRoot ? false : "needs root (runc, btrfs, netns)";
const CYCLES = Number(process.env.SPACE_TEST_LEAK_CYCLES ?? 100);

describe("no leaks", { skip, timeout: 900_000 }, () => {
  let node: TestNode;
  before(async () => {
    node = await startTestNode();
  });
  after(async () => node?.close());

  it(`${CYCLES} create/kill cycles and failed creates leave no host objects`, async () => {
    const ids = new Set<string>();
    const m = node.agent.manager!;
    const before = await hostObjects(node, ids);
    const totals: number[] = [];
    for (let i = 0; i < CYCLES; i++) {
      const s = spec();
      ids.add(s.sandboxId);
      const st = await m.create(s, AbortSignal.timeout(60_000));
      totals.push(st.timings!.totalMs!);
      await m.kill(s.sandboxId, AbortSignal.timeout(60_000));
    }
    // Fault 1: the slot fails after the disk exists (a namespace already holds the name).
    for (let i = 0; i < 3; i++) {
      const s = spec();
      ids.add(s.sandboxId);
      const netns = node.agent.slots!.netnsOf(s.sandboxId);
      await exec("ip", ["netns", "add", netns]);
      await assert.rejects(m.create(s, AbortSignal.timeout(60_000)));
      await exec("ip", ["netns", "delete", netns], { allowFailure: true }); // the failed claim may have reclaimed it (named after the id)
    }
    // Fault 2: the runtime fails after disk and slot exist (a bind source is missing).
    const o = (m as unknown as { o: { envdDir: string } }).o;
    const envdDir = o.envdDir;
    o.envdDir = "/nonexistent/envd";
    try {
      for (let i = 0; i < 3; i++) {
        const s = spec();
        ids.add(s.sandboxId);
        await assert.rejects(m.create(s, AbortSignal.timeout(60_000)));
      }
    } finally {
      o.envdDir = envdDir;
    }
    // Deleted subvolumes (and their qgroups) are dropped by the kernel's cleaner, later.
    await waitFor(async () => {
      await node.agent.disks!.reapQgroups();
      return (await hostObjects(node, ids)).qgroups === before.qgroups;
    }, 120_000, "deleted subvolumes dropped");
    const afterCycles = await hostObjects(node, ids);
    assert.deepEqual(afterCycles, before);
    assert.equal(m.count(), 0);
    totals.sort((a, b) => a - b);
    console.log(`create-to-ready over ${CYCLES}: median ${totals[Math.floor(totals.length / 2)]} ms, p99 ${totals[Math.floor(totals.length * 0.99)]} ms`);
  });
});
