/**
 * Capture after boot on a real node (btrfs, runc, CRIU, real envd): the first cold create of
 * a template boots it and has a checkpoint of the template booted made behind the answer;
 * later cold creates restore that checkpoint, each with its own id, name, env vars and
 * disk; a restore that fails drops the checkpoint and boots; removing or re-pointing the
 * template drops its checkpoint; a node restarted on the same data keeps it.
 */
import assert from "node:assert/strict";
import { readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { SandboxSpec } from "../../src/contract/node-api.ts";
import { processClient } from "../../src/operations/envd-process-client.ts";
import { hasRealEnvd, isRoot, sh, spec, startTestNode, waitFor, type TestNode } from "../node/helpers.ts";

const skip = !isRoot ? "needs root" : !hasRealEnvd ? "needs dist/envd (npm run build:envd)" : false;

describe("template capture after boot (node)", { skip, timeout: 10 * 60_000 }, () => {
  let node: TestNode;
  let dir: string;
  const env = { SPACE_NODE_SLOT_CIDR: "10.203.80.0/20", SPACE_NODE_BOOT_CAPTURE: "true" } as const;
  const hostScope = { bridge: "spacebc0", nftTable: "space_bc", vethPrefix: "vbc", cgroupParent: "space-bc" };

  before(async () => {
    node = await startTestNode({ env, deps: { hostScope }, realEnvd: true });
    dir = node.dir;
  });
  after(async () => {
    await node?.close();
  });

  const record = (template: string) => join(dir, "node", "boot-captures", `${template}.json`);
  const hasRecord = (template: string) => stat(record(template)).then(() => true, () => false);
  /** A create through the node's API, as the control plane makes it; its timings say whether it was restored. */
  const create = async (over: Partial<SandboxSpec> = {}) => {
    const s = spec(over);
    const res = await node.agent.app.inject({ method: "POST", url: "/v1/sandboxes", headers: { authorization: "Bearer test-token" }, payload: s });
    assert.equal(res.statusCode, 201, res.body);
    const timings = (JSON.parse(res.body) as { timings?: Record<string, number> }).timings ?? {};
    return { id: s.sandboxId, restored: "restoreTotalMs" in timings };
  };
  const kill = (id: string) => node.agent.manager!.kill(id, AbortSignal.timeout(60_000));
  /** `script`'s stdout, run by the sandbox's envd as a user's command is. */
  const envdRun = async (id: string, script: string) => {
    const envd = node.agent.manager!.target(id, 49983);
    let out = "";
    for await (const r of processClient({ baseUrl: new URL(`http://${envd.host}:${envd.port}`), headers: {} }).start({ process: { cmd: "/bin/bash", args: ["-l", "-c", script], envs: {} }, stdin: false })) {
      const ev = r.event?.event;
      if (ev?.case === "data" && ev.value.output.case === "stdout") out += Buffer.from(ev.value.output.value).toString();
    }
    return out;
  };
  const localSnapshots = async () => (await node.agent.snapshots!.listLocal()).map((s) => s.snapshotId);

  it("the first cold create boots and has the template checkpointed behind it; the next ones restore it, each its own sandbox", async () => {
    assert.equal(await hasRecord("base"), false);
    const first = await create();
    assert.equal(first.restored, false, "nothing to restore yet: booted");
    await waitFor(() => hasRecord("base"), 60_000, "the capture after boot of base");
    // The sandbox it was made of is gone: only the first create's is on the node.
    await waitFor(async () => node.agent.manager!.list().length === 1, 30_000, "the capture's sandbox ended");
    assert.deepEqual(node.agent.manager!.list().map((s) => s.sandboxId), [first.id]);
    await sh(node, first.id, "echo only-in-first > /tmp/mark");

    const a = await create({ envVars: { GREETING: "hello" } });
    const b = await create({ memoryMib: 384 });
    assert.equal(a.restored, true, "restored from the checkpoint");
    assert.equal(b.restored, true);
    assert.equal((await sh(node, a.id, "hostname; cat /etc/hostname")).stdout, `${a.id}\n${a.id}\n`, "its own name, in the kernel and in /etc");
    // A process envd starts sees the sandbox's own env vars (its /init), not the capture's.
    assert.equal(await envdRun(a.id, 'echo "$E2B_SANDBOX_ID $GREETING"'), `${a.id} hello\n`);
    // Its own disk: nothing of the first sandbox, and what it writes stays its own.
    assert.equal((await sh(node, a.id, "cat /tmp/mark 2>/dev/null || echo none")).stdout, "none\n");
    await sh(node, a.id, "echo a > /tmp/mine");
    assert.equal((await sh(node, b.id, "cat /tmp/mine 2>/dev/null || echo none")).stdout, "none\n");
    // Its own resources.
    assert.equal(node.agent.manager!.get(b.id).memoryMib, 384);
    const memDir = node.agent.runtime!.cgroupDirs(b.id).memory!;
    const limit = await readFile(join(memDir, "memory.limit_in_bytes"), "utf8").catch(() => readFile(join(memDir, "memory.max"), "utf8"));
    assert.equal(Number(limit.trim()), 384 * 1048576);
    // Restored or booted, a create is admitted the same: a disk below the template's rootfs is refused at once.
    const small = await node.agent.app.inject({ method: "POST", url: "/v1/sandboxes", headers: { authorization: "Bearer test-token" }, payload: spec({ diskMib: 64 }) });
    assert.equal(small.statusCode, 400, small.body);
    assert.match(small.body, /rootfs_size_mb=64 is smaller than cloned rootfs size/);
    // Disks of the checkpoint are made ahead: the next restore renames one into place.
    const warm = async () => (await readdir(node.agent.disks!.cache.sandboxesDir)).filter((n) => n.startsWith(".warmsrc-"));
    const ready = await waitFor(async () => ((await warm()).length ? warm() : undefined), 30_000, "a disk made ahead of the checkpoint's");
    const c = await create();
    assert.equal(c.restored, true);
    const left = await warm();
    assert.ok(ready.some((n) => !left.includes(n)), `one of ${ready.join(", ")} was taken (left: ${left.join(", ")})`);
    for (const id of [first.id, a.id, b.id, c.id]) await kill(id);
  });

  it("a restore that fails drops the checkpoint, boots the create, and the next cold create makes a new one", async () => {
    const before = await localSnapshots();
    assert.equal(before.length, 1, "the checkpoint of base");
    // Its memory image lost: CRIU cannot restore it.
    const image = join(dir, "node", "snapshots", before[0]!, "image");
    for (const f of await readdir(image)) if (f.startsWith("pages-")) await rm(join(image, f));
    const c = await create();
    assert.equal(c.restored, false, "booted instead");
    assert.equal(await hasRecord("base"), false, "the broken checkpoint is dropped");
    assert.deepEqual(await localSnapshots(), [], "and its copy freed");
    await kill(c.id);
    const d = await create();
    assert.equal(d.restored, false);
    await waitFor(() => hasRecord("base"), 60_000, "a new checkpoint of base");
    await kill(d.id);
    const e = await create();
    assert.equal(e.restored, true);
    await kill(e.id);
  });

  it("a node restarted on the same data restores the checkpoint it made; removing the template drops it", async () => {
    await node.agent.templates!.point("bc-alias", "base", AbortSignal.timeout(60_000));
    const first = await create({ template: "bc-alias" });
    assert.equal(first.restored, false);
    await waitFor(() => hasRecord("bc-alias"), 60_000, "the capture after boot of bc-alias");
    await kill(first.id);
    assert.equal((await localSnapshots()).length, 2, "base's and bc-alias's");

    await node.close({ keepDir: true });
    node = await startTestNode({ dir, env, deps: { hostScope }, realEnvd: true });
    const again = await create({ template: "bc-alias" });
    assert.equal(again.restored, true, "restored after the restart");
    await kill(again.id);

    const { snapshot } = JSON.parse(await readFile(record("bc-alias"), "utf8")) as { snapshot: { snapshotId: string } };
    const madeAhead = async () => (await readdir(node.agent.disks!.cache.sandboxesDir)).filter((n) => n.startsWith(".warmsrc-") && n.includes(snapshot.snapshotId));
    await waitFor(async () => (await madeAhead()).length > 0, 30_000, "disks made ahead of bc-alias's checkpoint");
    await node.agent.templates!.remove("bc-alias", AbortSignal.timeout(60_000), { catalog: false });
    assert.equal(await hasRecord("bc-alias"), false);
    assert.equal((await localSnapshots()).length, 1, "only base's is left");
    await waitFor(async () => (await madeAhead()).length === 0, 30_000, "the disks made ahead of the dropped checkpoint deleted");
  });
});
