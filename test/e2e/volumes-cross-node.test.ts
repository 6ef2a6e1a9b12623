/**
 * A volume moves with a drain (issue 26, docs/volumes.md "Moves"): `space up` (node A) and a
 * standalone `space node` (node B) sharing the blob store and the cluster key
 * (test/support/two-nodes.ts). A sandbox on A writes into a volume and is killed; a forced
 * drain of A (the Admin API) sends the unattached volume through the blob store
 * (encrypted) to B; a new sandbox mounting it is placed on B and reads the file, and the
 * content API reads it on B too. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, Volume, type ConnectionOpts } from "e2b";
import { startTwoNodes, type TwoNodes } from "../support/two-nodes.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

/** Every file under `dir` (the blob store's volume streams). */
const filesUnder = (dir: string): string[] =>
  !existsSync(dir) ? [] : readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? filesUnder(join(dir, n)) : [join(dir, n)]));

describe("a volume across two nodes (space up + a standalone node)", { skip, timeout: 10 * 60_000 }, () => {
  let two: TwoNodes;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  let volumeId = "";

  before(async () => {
    two = await startTwoNodes("volx");
    const s = two.stack;
    opts = { apiKey: s.apiKey, apiUrl: s.apiUrl, sandboxUrl: s.sandboxUrl, requestTimeoutMs: 300_000 } as ConnectionOpts & { sandboxUrl: string };
    process.env.E2B_VOLUME_API_URL = s.apiUrl;
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    if (volumeId) await Volume.destroy(volumeId, opts).catch(() => undefined);
    await two?.stop();
    delete process.env.E2B_VOLUME_API_URL;
  });

  test("a volume moves to another node when its node is drained and keeps its data", async () => {
    const marker = `vol-move-${randomBytes(8).toString("hex")}`;
    await two.only("a");
    const vol = await Volume.create(`moving-${randomBytes(3).toString("hex")}`, opts);
    volumeId = vol.volumeId;
    const first = await Sandbox.create({ ...opts, volumeMounts: { "/mnt/v": vol } });
    created.push(first.sandboxId);
    assert.ok(two.runcList(join(two.stack.dataDir, "runc")).includes(first.sandboxId), "the first sandbox runs on node A");
    await first.commands.run(`mkdir -p /mnt/v/d && echo ${marker} > /mnt/v/d/kept.txt`);
    await first.kill();

    // B takes work again; A is drained by force: no sandbox holds the volume, so it moves.
    assert.equal((await two.admin("POST", `/nodes/${two.ids.b}/ready`, {})).body.status, "ready");
    const d = await two.admin("POST", `/nodes/${two.ids.a}/drain`, { mode: "forced" });
    assert.equal(d.status, 200, JSON.stringify(d.body));
    const ev = d.body.evacuation as { volumes: { moved: string[]; stayed: string[] } };
    // Why one stayed is in the stack's log ("volume not moved off the draining node").
    const why = () => two.stack.output().split("\n").filter((l) => l.includes("volume")).join("\n");
    assert.deepEqual(ev.volumes, { moved: [vol.volumeId], stayed: [] }, `${JSON.stringify(d.body.evacuation)}\n${why()}`);
    // The stream went through the blob store encrypted: no blob holds the marker in plaintext.
    const streams = filesUnder(join(two.stack.dataDir, "blobs", "volumes", vol.volumeId));
    assert.ok(streams.length > 0, "the volume was sent to the blob store");
    for (const f of streams) assert.ok(!readFileSync(f).includes(marker), `${f} holds the marker in plaintext`);

    // Both nodes take work again: a mounting sandbox goes where the volume is now, B.
    assert.equal((await two.admin("POST", `/nodes/${two.ids.a}/ready`, {})).body.status, "ready");
    const second = await Sandbox.create({ ...opts, volumeMounts: { "/mnt/v": vol.name } });
    created.push(second.sandboxId);
    assert.ok(two.runcList(two.bRuntimeStateDir).includes(second.sandboxId), "the mounting sandbox runs on node B");
    assert.equal((await second.commands.run("cat /mnt/v/d/kept.txt")).stdout, `${marker}\n`);
    await second.commands.run("echo after-move > /mnt/v/d/b.txt");
    await second.kill();
    // The content API follows the volume to B.
    assert.equal(await vol.readFile("/d/kept.txt"), `${marker}\n`);
    assert.equal(await vol.readFile("/d/b.txt"), "after-move\n");
  });
});
