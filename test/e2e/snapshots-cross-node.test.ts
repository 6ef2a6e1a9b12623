/**
 * suspend_restore_cross_node_from_object_storage through the control plane: `space up`
 * (node A, in-process) plus a second standalone `space node` (node B) on this machine with
 * its own data dir, node cache and host scope. The two share nothing but the blob store
 * (B's SPACE_BLOB_URL is A's `<data dir>/blobs`) and the cluster key.
 *
 * ECW (e2b SDK): a sandbox on A with a file, an env var and a counting process is paused
 * (suspend); A is drained, so `connect` restores it on B, whose cache never held the
 * snapshot or A's template: B fetches the encrypted parts and pulls the parent template
 * from the blob store (btrfs_send_restore_pulls_parent_template). Native: the same from B
 * back to A. Files, env and process memory survive both moves; no blob holds the
 * plaintext of a marker written in the sandboxes. Both connects follow the pause at once:
 * a pause answers before its snapshot is durable, and a restore the paused node cannot
 * take (it is drained) waits for the publication. Last, node B is killed between a pause
 * and durable: the sandbox stays paused, its connect is refused naming the snapshot local
 * to B, and nothing runs it elsewhere. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import type { Stack } from "../support/stack.ts";
import { startTwoNodes, type TwoNodes } from "../support/two-nodes.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;
const RUN = randomBytes(3).toString("hex");
const MARKER = `xnode-marker-${randomBytes(6).toString("hex")}`;
const LOOP = `nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /home/user/n.tmp; mv -f /home/user/n.tmp /home/user/n; sleep 0.1; done' >/dev/null 2>&1 &`;

describe(
  "cross-node suspend/restore through the control plane (space up + a standalone node)",
  { skip, timeout: 10 * 60_000 },
  () => {
    let two: TwoNodes;
    let stack: Stack;
    let opts: ConnectionOpts & { sandboxUrl: string };
    const created: string[] = [];
    const only = (on: "a" | "b") => two.only(on);
    const runcList = (stateDir: string) => two.runcList(stateDir);
    const stateDirA = () => join(stack.dataDir, "runc");
    const localSnapshots = (nodeDir: string) => {
      const dir = join(nodeDir, "snapshots");
      return existsSync(dir) ? readdirSync(dir).filter((n) => n.startsWith("sn_")) : [];
    };

    before(async () => {
      two = await startTwoNodes("xnode");
      stack = two.stack;
      opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
    });

    after(async () => {
      await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
      await two?.stop();
    });

    test("ECW: paused on node A, connect restores on node B from the blob store (parent template pulled); file, env and memory survive", async () => {
      await only("a");
      const sb = await Sandbox.create({ ...opts, envs: { XNODE_MARK: MARKER }, timeoutMs: 600_000 });
      created.push(sb.sandboxId);
      assert.ok(runcList(stateDirA()).includes(sb.sandboxId), "created on node A");
      await sb.files.write("/home/user/note.txt", MARKER);
      await sb.commands.run(LOOP);
      await new Promise((r) => setTimeout(r, 600));
      const before = Number((await sb.files.read("/home/user/n")).trim());
      assert.ok(before > 0, `the loop runs (${before})`);

      assert.equal(await sb.pause(), true);
      assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "paused");
      assert.deepEqual(localSnapshots(join(two.bDir, "node")), [], "node B holds no snapshot before the restore");
      await only("b");

      const t0 = Date.now();
      const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
      const restoreMs = Date.now() - t0;
      assert.ok(runcList(two.bRuntimeStateDir).includes(sb.sandboxId), "restored on node B");
      assert.ok(!runcList(stateDirA()).includes(sb.sandboxId), "not on node A");
      assert.match(two.nodeBOutput(), /snapshot fetched from the blob store/, "B fetched the parts from the blob store");
      assert.match(
        two.nodeBOutput(),
        /snapshot parent received from the blob store/,
        "B pulled the parent template from the blob store",
      );
      assert.equal(await back.files.read("/home/user/note.txt"), MARKER);
      assert.equal((await back.commands.run("echo $XNODE_MARK")).stdout, `${MARKER}\n`);
      const c1 = Number((await back.files.read("/home/user/n")).trim());
      await new Promise((r) => setTimeout(r, 400));
      const c2 = Number((await back.files.read("/home/user/n")).trim());
      assert.ok(c1 >= before && c2 > c1, `the loop kept its count and runs on (${before} → ${c1} → ${c2})`);
      console.log(`# cross-node connect (restore on B from the blob store) ${restoreMs} ms`);
    });

    test("Native: suspended on node B, restored on node A from the blob store; file and memory survive", async (t) => {
      const why = await nativeSkipReason(stack.apiUrl);
      if (why) return t.skip(why);
      const { token } = await tenantWithToken(stack.apiUrl, stack.adminToken, `xnode-${RUN}`, ALL);
      const n = new NativeClient(stack.apiUrl, token);
      await only("b");
      const sid = await n.create({ metadata: { suite: "xnode" } });
      created.push(sid);
      assert.ok(runcList(two.bRuntimeStateDir).includes(sid), "created on node B");
      const w = await n.run(sid, { cmd: "/bin/sh", args: ["-c", `echo ${MARKER} > /home/user/native.txt; ${LOOP}`] });
      assert.equal(w.op.state, "succeeded", JSON.stringify(w.op.failure));
      await new Promise((r) => setTimeout(r, 600));
      const count = async () => Number((await n.run(sid, { cmd: "/bin/cat", args: ["/home/user/n"] })).stdout.trim());
      const before = await count();
      assert.ok(before > 0, `the loop runs (${before})`);

      const op = async (verb: string) => n.wait((await n.req("POST", `/v1/sandboxes/${sid}/${verb}`, { body: {} })).body.id);
      const sus = await op("suspend");
      assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
      const aSnapshotsBefore = localSnapshots(join(stack.dataDir, "node"));
      await only("a");
      const res = await op("restore");
      assert.equal(res.state, "succeeded", JSON.stringify(res.failure));
      assert.ok(runcList(stateDirA()).includes(sid), "restored on node A");
      assert.ok(!runcList(two.bRuntimeStateDir).includes(sid), "not on node B");
      const fetched = localSnapshots(join(stack.dataDir, "node")).filter((s) => !aSnapshotsBefore.includes(s));
      assert.equal(fetched.length, 1, "node A fetched the one snapshot it never had");
      assert.equal((await n.run(sid, { cmd: "/bin/cat", args: ["/home/user/native.txt"] })).stdout, `${MARKER}\n`);
      const c1 = await count();
      await new Promise((r) => setTimeout(r, 400));
      const c2 = await count();
      assert.ok(c1 >= before && c2 > c1, `the loop kept its count and runs on (${before} → ${c1} → ${c2})`);
    });

    test("node B killed between pause and durable: the sandbox stays paused, connect refused naming the local snapshot, nothing restored elsewhere", async () => {
      await only("b");
      // B holds nothing else when it dies (no host objects left behind by the kill).
      await Promise.allSettled(created.splice(0).map((id) => Sandbox.kill(id, opts)));
      const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
      created.push(sb.sandboxId);
      assert.ok(runcList(two.bRuntimeStateDir).includes(sb.sandboxId), "created on node B");
      // Incompressible bytes on its disk: the publication takes seconds, a window for the kill.
      await sb.commands.run("head -c 400M /dev/urandom > /home/user/big && sync", { timeoutMs: 300_000 });
      assert.equal(await sb.pause(), true);
      await two.killB();
      await only("a").catch(() => undefined);
      const r = await fetch(`${stack.apiUrl}/sandboxes/${sb.sandboxId}/connect`, {
        method: "POST",
        headers: { "x-api-key": stack.apiKey, "content-type": "application/json" },
        body: JSON.stringify({ timeout: 600 }),
      });
      const body = (await r.json()) as { code: number; message: string };
      assert.equal(r.status, 503, JSON.stringify(body));
      assert.match(body.message, /is local to node .*not durable/);
      assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "paused");
      assert.ok(!runcList(stateDirA()).includes(sb.sandboxId), "not restored on node A from anything");
    });

    test("encrypted: no blob holds the plaintext of the marker written in the sandboxes", () => {
      const blobs = join(stack.dataDir, "blobs");
      const list = spawnSync("find", [blobs, "-type", "f"], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
      assert.ok(
        list.some((f) => f.endsWith(".enc")),
        `encrypted parts in ${blobs}: ${list.join(", ")}`,
      );
      const hits = spawnSync("grep", ["-r", "-l", "-a", MARKER, blobs], { encoding: "utf8" });
      assert.equal(hits.stdout.trim(), "", `blobs holding the marker in plaintext: ${hits.stdout}`);
    });
  },
);
