// Disks made ahead (src/node/disk/warm-disks.ts) on a real node cache: a create takes one
// (the sandbox's subvolume is one made ahead, its hot files read ahead), never one made of a template that has
// since been swapped in place, and the node leaves none behind.
import assert from "node:assert/strict";
import { readdir, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { isRoot, sh, spec, startTestNode, waitFor, type TestNode } from "./helpers.ts";

const skip = isRoot ? false : "needs root (runc, btrfs, netns)";
const sig = () => AbortSignal.timeout(60_000);

describe("warm disks", { skip, timeout: 300_000 }, () => {
  let node: TestNode;
  let sandboxes: string;
  let templates: string;
  const rootId = async (path: string) => Number((await exec("btrfs", ["inspect-internal", "rootid", path])).stdout.trim());
  const warm = async () => (await readdir(sandboxes)).filter((n) => n.startsWith(".warm-base-"));

  before(async () => {
    node = await startTestNode({ env: { SPACE_NODE_WARM_DISKS: "2" } });
    sandboxes = join(node.dir, "node", "cache", "sandboxes");
    templates = join(node.dir, "node", "cache", "templates");
  });
  after(async () => node?.close());

  it("a create takes a disk made ahead; they are made again up to the size", async () => {
    const m = node.agent.manager!;
    const first = spec();
    await m.create(first, sig()); // the template's first use: a snapshot of its own, then disks are made ahead
    // Ready as the node counts them: a disk's directory exists from its snapshot on, before its files are read ahead.
    await waitFor(async () => node.agent.disks!.warm.readyCount("base") === 2, 30_000, "two disks made ahead");
    const ids = new Set(await Promise.all((await warm()).map((n) => rootId(join(sandboxes, n)))));
    // Made ahead with the files envd's start and `bash -l` read already in its page cache; the rest not.
    const resident = async (path: string) => Number((await exec("fincore", ["--bytes", "--noheadings", "--output", "RES", path])).stdout.trim());
    const disk = join(sandboxes, (await warm())[0]!);
    assert.ok((await resident(join(disk, "usr/bin/bash"))) > 0, "bash is read ahead");
    assert.ok((await resident(join(disk, "usr/lib/x86_64-linux-gnu/libstdc++.so.6"))) > 0, "Node.js's libstdc++ is read ahead");
    assert.equal(await resident(join(disk, "usr/bin/tar")), 0, "a file no start reads is not");
    const second = spec();
    const st = await m.create(second, sig());
    assert.ok(ids.has(await rootId(join(sandboxes, second.sandboxId))), "the sandbox's disk is one made ahead");
    assert.equal((await sh(node, second.sandboxId, "echo ok > /tmp/w && cat /tmp/w")).stdout.trim(), "ok", "it is writable");
    assert.ok(st.timings!.diskMs! >= 0);
    await waitFor(async () => (await warm()).length === 2, 30_000, "refilled");
    await m.kill(first.sandboxId, sig());
    await m.kill(second.sandboxId, sig());
  });

  it("never hands out a disk of a template swapped in place since it was made", async () => {
    const m = node.agent.manager!;
    await waitFor(async () => (await warm()).length === 2, 30_000, "two disks made ahead");
    // A new build swapped in under the same name (as TemplateCache.point does), without telling the disks.
    const base = join(templates, "base");
    const next = join(templates, ".next-base");
    await exec("btrfs", ["subvolume", "snapshot", base, next]);
    await writeFile(join(next, "new-build"), "2\n");
    await exec("btrfs", ["property", "set", "-ts", next, "ro", "true"]);
    await rename(base, join(templates, ".old-base"));
    await rename(next, base);
    const s = spec();
    await m.create(s, sig());
    assert.equal((await sh(node, s.sandboxId, "cat /new-build")).stdout.trim(), "2", "the disk is of the new build");
    await m.kill(s.sandboxId, sig());
    await exec("btrfs", ["subvolume", "delete", join(templates, ".old-base")]);
  });

  it("deletes its disks when the node stops, and an earlier node's leftovers on its first fill", async () => {
    await waitFor(async () => (await warm()).length === 2, 30_000, "two disks made ahead");
    await node.close({ keepDir: true, unmount: false });
    assert.deepEqual(await warm(), [], "none left after a stop");
    // A crash leaves one behind; the next node deletes it before filling.
    await exec("btrfs", ["subvolume", "snapshot", join(templates, "base"), join(sandboxes, ".warm-base-leftover")]);
    node = await startTestNode({ dir: node.dir, env: { SPACE_NODE_WARM_DISKS: "2" } });
    const s = spec();
    await node.agent.manager!.create(s, sig());
    await waitFor(async () => (await warm()).length === 2, 30_000, "filled again");
    assert.ok(!(await warm()).includes(".warm-base-leftover"), "the leftover is gone");
    await node.agent.manager!.kill(s.sandboxId, sig());
  });
});
