/**
 * Node-level suspend / restore / fork on real runc + CRIU 4.1.1 + btrfs, with two node
 * agents on this machine (own caches, bridges, nft tables, cgroup parents, slot ranges)
 * sharing only a filesystem blob store: same-node restore from the local copy, cross-node
 * restore fed only from the blob store (parent template pulled), fork of a running
 * sandbox, a disk snapshot (no memory part) booted fresh on the other node, corrupted and
 * parentless streams refused, encrypted parts and parent (template) streams free of plaintext.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import { createReadStream } from "node:fs";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { after, before, describe, it } from "node:test";
import { FsBlobStore } from "../../src/blob/open.ts";
import { decryptStream, encryptStream, parseClusterKey, unwrapKey } from "../../src/core/envelope.ts";
import { exec } from "../../src/core/exec.ts";
import { newExecutionId, newSandboxId } from "../../src/core/ids.ts";
import { newSnapshotId } from "../../src/store/snapshots.ts";
import type { SnapshotDescriptor } from "../../src/contract/snapshot-descriptor.ts";
import { ENVD_PORT } from "../../src/contract/node-api.ts";
import { hasRealEnvd, isRoot, sh, spec, startTestNode, type TestNode } from "../node/helpers.ts";
import { waitFor } from "../support/wait.ts";

const criu = join(process.cwd(), ".tools", "criu", "criu");
const skip = !isRoot ? "needs root" : !hasRealEnvd ? "needs dist/envd (npm run build:envd)" : false;
const KEY = randomBytes(32).toString("hex");
const MARKER = `plaintext-marker-${randomBytes(6).toString("hex")}`;

/** Every entry's type, mode, links, owner, size or device numbers and target (times aside: mount roots are new). */
const DEV_LISTING = "ls -lanR --time-style=+ /dev /sys/fs/cgroup | grep -v '^total'";

async function files(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) if (e.isFile()) out.push(join(e.parentPath, e.name));
  return out;
}

describe("node snapshots: suspend, restore (same node, cross node), fork", { skip, timeout: 15 * 60_000 }, () => {
  let a: TestNode;
  let b: TestNode;
  let blobDir = "";
  const s = spec({ memoryMib: 512 });
  const id = s.sandboxId;
  let desc1: SnapshotDescriptor;
  let desc2: SnapshotDescriptor;
  let forkDesc: SnapshotDescriptor;
  let devListing = "";

  const counter = async (node: TestNode, sid: string) => Number((await sh(node, sid, "cat /home/user/counter")).stdout.trim());
  const restoreSpec = (sid = id) => ({ ...s, sandboxId: sid, executionId: newExecutionId() });

  before(async () => {
    blobDir = await mkdtemp(join(tmpdir(), "space-snap-blobs-"));
    const common = { SPACE_BLOB_URL: blobDir, SPACE_ENCRYPTION_KEY: KEY };
    a = await startTestNode({
      realEnvd: true,
      env: { ...common, SPACE_NODE_SLOT_CIDR: "10.251.0.0/20" },
      deps: { hostScope: { bridge: "spsna0", nftTable: "space_snap_a", vethPrefix: "vsa", cgroupParent: "space-snap-a" } },
    });
    b = await startTestNode({
      realEnvd: true,
      env: { ...common, SPACE_NODE_SLOT_CIDR: "10.251.16.0/20" },
      deps: { hostScope: { bridge: "spsnb0", nftTable: "space_snap_b", vethPrefix: "vsb", cgroupParent: "space-snap-b" } },
    });
    assert.ok(a.agent.snapshots, `node A cannot checkpoint (criu at ${criu}?)`);
  });
  after(async () => {
    await a?.close();
    await b?.close();
    if (blobDir) await rm(blobDir, { recursive: true, force: true });
  });

  it("suspend: memory + disk captured, parts durable and checksummed, node freed", async () => {
    await a.agent.manager!.create(s, AbortSignal.timeout(120_000));
    // Written by rename, so a reader never sees the file truncated mid-write.
    const py =
      "import os, time\ni = 0\nwhile True:\n    i += 1\n    with open('/home/user/counter.tmp', 'w') as f:\n        f.write(str(i))\n    os.replace('/home/user/counter.tmp', '/home/user/counter')\n    time.sleep(0.05)\n";
    await writeFile(join(a.agent.disks!.sandboxRoot(id), "home/user/count.py"), py);
    const started = await sh(a, id, `nohup python3 /home/user/count.py >/dev/null 2>&1 & echo ${MARKER} > /home/user/note.txt`);
    assert.equal(started.exitCode, 0, started.stderr);
    // tmpfs mounts: one with a file, one empty but no longer as mounted (an empty one as
    // mounted is recreated by its mount alone, without an archive in the image).
    const tmpfs = await sh(a, id, `echo ${MARKER} > /dev/shm/note && chmod 0710 /run`, "root");
    assert.equal(tmpfs.exitCode, 0, tmpfs.stderr);
    // /dev's tmpfs with a dir, a file (mode, owner), a symlink and a FIFO beside runc's nodes.
    const dev = await sh(a, id, "mkdir /dev/extra && echo x > /dev/extra/f && chmod 0640 /dev/extra/f && chown 1000:1000 /dev/extra/f && ln -s f /dev/extra/l && mkfifo /dev/extra/p", "root");
    assert.equal(dev.exitCode, 0, dev.stderr);
    devListing = (await sh(a, id, DEV_LISTING, "root")).stdout;
    await new Promise((r) => setTimeout(r, 700));
    const before = await counter(a, id);
    assert.ok(before > 0);
    desc1 = await a.agent.snapshots!.suspend(id, newSnapshotId(), { upload: true }, AbortSignal.timeout(300_000));
    assert.deepEqual(desc1.parts.map((p) => p.kind), ["disk", "memory"]);
    for (const p of desc1.parts) {
      assert.match(p.sha256, /^[0-9a-f]{64}$/);
      assert.ok(p.sizeBytes > 0);
    }
    assert.ok(desc1.wrappedKey, "encrypted: a wrapped data key");
    // Gone from the node at the answer; its container, slot and disk are released behind it
    // (the next test restores the same id at once: it waits for them).
    assert.throws(() => a.agent.manager!.get(id), /not on this node/);
    assert.ok(!a.agent.manager!.list().some((x) => x.sandboxId === id));
    // Small tmpfs mounts (/dev above) are kept as CRIU patch 0005's tree, not a tar.gz.
    const image = join(a.dir, "node", "snapshots", desc1.snapshotId, "image");
    const trees = [];
    for (const f of (await readdir(image)).filter((n) => n.startsWith("tmpfs-dev-"))) {
      if ((await readFile(join(image, f))).subarray(0, 18).toString() === "SPACE-TMPFS-TREE1\n") trees.push(f);
    }
    assert.ok(trees.length > 0, "a tmpfs image holds a tree");
  });

  it("restore on the same node from the local copy, at once: the process keeps counting, files are there", async () => {
    const st = await a.agent.snapshots!.restore(restoreSpec(), desc1, AbortSignal.timeout(300_000));
    assert.equal(st.state, "running");
    const c1 = await counter(a, id);
    await new Promise((r) => setTimeout(r, 400));
    const c2 = await counter(a, id);
    assert.ok(c2 > c1, `counter moves on after restore (${c1} → ${c2})`);
    assert.equal((await sh(a, id, "cat /home/user/note.txt")).stdout.trim(), MARKER);
    assert.equal((await sh(a, id, "cat /dev/shm/note; stat -c %a /run; find /proc/acpi /sys/firmware -mindepth 1 | wc -l", "root")).stdout, `${MARKER}\n710\n0\n`);
    assert.equal((await sh(a, id, DEV_LISTING, "root")).stdout, devListing, "/dev and /sys/fs/cgroup entry for entry");
    assert.equal((await sh(a, id, "cat /dev/extra/l", "root")).stdout, "x\n");
    // The init is back in its own cgroup namespace: it sees its cgroups as roots, not the host's paths.
    const cgroups = (await sh(a, id, "cat /proc/1/cgroup")).stdout.trim().split("\n");
    assert.ok(cgroups.length > 0 && cgroups.every((l) => l.endsWith(":/")), cgroups.join(" | "));
    const ps = await sh(a, id, "ps -eo user,args");
    assert.match(ps.stdout, /user\s+python3 \/home\/user\/count.py/);
    // envd answers through the node's proxy path (health over the new slot)
    const res = await fetch(`http://${st.address}:49983/health`);
    assert.equal(res.status, 204);
  });

  it("restore on a second node fed only from the blob store (parent template pulled), the parts published after the suspend answered", async () => {
    const c0 = await counter(a, id);
    const local = await a.agent.snapshots!.suspend(id, newSnapshotId(), { upload: false }, AbortSignal.timeout(300_000));
    assert.deepEqual(local.parts, [], "answered with the capture on the node only");
    desc2 = await a.agent.snapshots!.publish(local.snapshotId, AbortSignal.timeout(300_000));
    assert.deepEqual(desc2.parts.map((p) => p.kind), ["disk", "memory"]);
    assert.ok(desc2.wrappedKey, "published encrypted, as at capture");
    await a.agent.snapshots!.dropLocal(desc2.snapshotId); // not even node A keeps it
    const st = await b.agent.snapshots!.restore(restoreSpec(), desc2, AbortSignal.timeout(300_000));
    assert.equal(st.state, "running");
    assert.match(st.address, /^10\.251\.(1[6-9]|2\d|3[01])\./);
    const c1 = await counter(b, id);
    assert.ok(c1 >= c0);
    await new Promise((r) => setTimeout(r, 400));
    assert.ok((await counter(b, id)) > c1);
    assert.equal((await sh(b, id, "cat /home/user/note.txt")).stdout.trim(), MARKER);
  });

  it("fork: two new sandboxes from a live checkpoint, the source keeps running, each independent", async () => {
    forkDesc = await b.agent.snapshots!.capture(id, newSnapshotId(), { upload: true }, AbortSignal.timeout(300_000));
    assert.equal(b.agent.manager!.get(id).state, "running");
    const ids = [newSandboxId(), newSandboxId()];
    const t0 = performance.now();
    const sts = await Promise.all(ids.map((fid) => b.agent.snapshots!.restore(restoreSpec(fid), forkDesc, AbortSignal.timeout(300_000))));
    const forkMs = performance.now() - t0;
    assert.ok(sts.every((x) => x.state === "running"));
    for (const fid of ids) {
      const c1 = await counter(b, fid);
      await new Promise((r) => setTimeout(r, 300));
      assert.ok((await counter(b, fid)) > c1, `fork ${fid} counts`);
      assert.equal((await sh(b, fid, "cat /home/user/note.txt")).stdout.trim(), MARKER);
    }
    await sh(b, ids[0]!, "echo only-in-fork > /home/user/fork.txt");
    assert.notEqual((await sh(b, id, "cat /home/user/fork.txt")).exitCode, 0, "the source does not see the fork's writes");
    assert.notEqual((await sh(b, ids[1]!, "cat /home/user/fork.txt")).exitCode, 0, "nor does the other fork");
    assert.ok((await counter(b, id)) > 0);
    console.log(`fork x2: ${Math.round(forkMs)} ms`);
    for (const fid of ids) await b.agent.manager!.kill(fid, AbortSignal.timeout(60_000));
    // A killed restore leaves no file naming it: not in the node dir (its logs aside, kept
    // for their retention) nor beside the disks in the cache (the disk's notes go with it).
    const nodeDir = join(b.dir, "node");
    const left: string[] = [];
    for (const top of await readdir(nodeDir, { withFileTypes: true })) {
      if (!top.isDirectory() || ["cache", "roots", "sandbox-logs"].includes(top.name)) continue;
      left.push(...(await files(join(nodeDir, top.name))));
    }
    left.push(...(await readdir(join(nodeDir, "cache", "sandboxes"))));
    assert.deepEqual(left.filter((f) => ids.some((fid) => f.includes(fid))), []);
  });

  it("a restored disk counts what its source wrote against disk_mib, on the same node and fetched on another", async () => {
    const rootfs = (await a.agent.disks!.templateInfo("base"))!.rootfsSizeMib;
    const small = spec({ diskMib: rootfs + 64 });
    await a.agent.manager!.create(small, AbortSignal.timeout(120_000));
    try {
      // What a fresh disk of the template references (less than rootfsSizeMib, an apparent size).
      const fresh = (await a.agent.disks!.usage(small.sandboxId, AbortSignal.timeout(30_000)))!.referencedBytes;
      const w = await sh(a, small.sandboxId, "dd if=/dev/urandom of=/home/user/first bs=1M count=40 conv=fsync 2>&1; echo rc=$?");
      assert.match(w.stdout, /rc=0/, w.stdout);
      const snap = await a.agent.snapshots!.capture(small.sandboxId, newSnapshotId(), { upload: true }, AbortSignal.timeout(300_000));
      for (const [node, fid] of [[a, newSandboxId()], [b, newSandboxId()]] as const) {
        await node.agent.snapshots!.restore({ ...small, sandboxId: fid, executionId: newExecutionId() }, snap, AbortSignal.timeout(300_000));
        try {
          const used = (await node.agent.disks!.usage(fid, AbortSignal.timeout(30_000)))!.referencedBytes;
          assert.ok(used >= fresh + 40 * 1048576, `usage ${used} counts the template (${fresh}) and the source's 40 MiB`);
          // 40 MiB more would pass only if the restored disk's limit forgot the first 40.
          const r = await sh(node, fid, "dd if=/dev/zero of=/home/user/second bs=1M count=40 conv=fsync 2>&1; echo rc=$?", "user", 120_000);
          assert.match(r.stdout, /Disk quota exceeded|No space left/, r.stdout);
          assert.doesNotMatch(r.stdout, /rc=0/);
        } finally {
          await node.agent.manager!.kill(fid, AbortSignal.timeout(60_000));
        }
      }
    } finally {
      await a.agent.manager!.kill(small.sandboxId, AbortSignal.timeout(60_000));
    }
  });

  it("a restore whose disk limit fails leaves nothing behind: no disk, no container, no sandbox; the next restore works", async () => {
    const src = spec();
    await a.agent.manager!.create(src, AbortSignal.timeout(120_000));
    const snap = await a.agent.snapshots!.capture(src.sandboxId, newSnapshotId(), { upload: false }, AbortSignal.timeout(300_000));
    const disks = a.agent.disks!;
    const limit = disks.limitSandboxDisk.bind(disks);
    disks.limitSandboxDisk = async () => {
      throw new Error("qgroup limit refused (test)");
    };
    const fid = newSandboxId();
    try {
      await assert.rejects(a.agent.snapshots!.restore({ ...src, sandboxId: fid, executionId: newExecutionId() }, snap, AbortSignal.timeout(300_000)), /qgroup limit refused/);
    } finally {
      disks.limitSandboxDisk = limit;
    }
    try {
      assert.throws(() => a.agent.manager!.get(fid), /not on this node/);
      await stat(disks.sandboxPath(fid)).then(
        () => assert.fail("the restored disk is left"),
        () => undefined,
      );
      const listed = await exec("runc", ["--root", join("/run/space-test", a.dir.split("/").pop()!), "list", "-q"]);
      assert.doesNotMatch(listed.stdout, new RegExp(fid));
      const again = await a.agent.snapshots!.restore({ ...src, sandboxId: fid, executionId: newExecutionId() }, snap, AbortSignal.timeout(300_000));
      assert.equal(again.state, "running");
    } finally {
      await a.agent.manager!.kill(fid, AbortSignal.timeout(60_000)).catch(() => undefined);
      await a.agent.manager!.kill(src.sandboxId, AbortSignal.timeout(60_000));
      await a.agent.snapshots!.dropLocal(snap.snapshotId);
    }
  });

  it("a restore whose envd refuses its /init (another access token) fails naming the answer and leaves nothing; with the token it runs, env vars set", async () => {
    const src = spec({ accessToken: "the-source-token" });
    await a.agent.manager!.create(src, AbortSignal.timeout(120_000));
    const snap = await a.agent.snapshots!.capture(src.sandboxId, newSnapshotId(), { upload: false }, AbortSignal.timeout(300_000));
    const fid = newSandboxId();
    try {
      // The restored envd keeps the source's token: its /init (the restore's readiness check) refuses another one.
      await assert.rejects(
        a.agent.snapshots!.restore({ ...src, sandboxId: fid, executionId: newExecutionId(), accessToken: "another-token" }, snap, AbortSignal.timeout(300_000)),
        /envd \/init of \w+ answered 401/,
      );
      assert.throws(() => a.agent.manager!.get(fid), /not on this node/);
      const listed = await exec("runc", ["--root", join("/run/space-test", a.dir.split("/").pop()!), "list", "-q"]);
      assert.doesNotMatch(listed.stdout, new RegExp(fid));
      const ok = await a.agent.snapshots!.restore({ ...src, sandboxId: fid, executionId: newExecutionId(), envVars: { RESTORED_AS: fid } }, snap, AbortSignal.timeout(300_000));
      assert.equal(ok.state, "running");
      assert.equal(ok.timings?.initMs, undefined, "the /init was the readiness check");
      const envs = await fetch(`http://${ok.address}:${ENVD_PORT}/envs`, { headers: { "x-access-token": "the-source-token" } });
      assert.equal(((await envs.json()) as Record<string, string>).RESTORED_AS, fid);
    } finally {
      await a.agent.manager!.kill(fid, AbortSignal.timeout(60_000)).catch(() => undefined);
      await a.agent.manager!.kill(src.sandboxId, AbortSignal.timeout(60_000));
      await a.agent.snapshots!.dropLocal(snap.snapshotId);
    }
  });

  it("a disk snapshot (filesystem-only pause): no memory part; restored on another node from the blob store it boots fresh, files kept", async () => {
    const d = spec({ memoryMib: 256 });
    await a.agent.manager!.create(d, AbortSignal.timeout(120_000));
    const started = await sh(a, d.sandboxId, `echo ${MARKER} > /home/user/disk-only.txt; nohup sleep 100023 >/dev/null 2>&1 &`);
    assert.equal(started.exitCode, 0, started.stderr);
    const snap = await a.agent.snapshots!.suspend(d.sandboxId, newSnapshotId(), { upload: true, kind: "disk" }, AbortSignal.timeout(300_000));
    assert.equal(snap.kind, "disk");
    assert.deepEqual(snap.parts.map((p) => p.kind), ["disk"], "the disk part only: no CRIU image");
    assert.throws(() => a.agent.manager!.get(d.sandboxId), /not on this node/);
    await a.agent.snapshots!.dropLocal(snap.snapshotId);
    const st = await b.agent.snapshots!.restore({ ...d, executionId: newExecutionId() }, snap, AbortSignal.timeout(300_000));
    try {
      assert.equal(st.state, "running");
      assert.equal((await sh(b, d.sandboxId, "cat /home/user/disk-only.txt")).stdout.trim(), MARKER);
      assert.doesNotMatch((await sh(b, d.sandboxId, "ps -eo args")).stdout, /sleep 100023/, "no process came back: a fresh boot");
      assert.equal((await fetch(`http://${st.address}:49983/health`)).status, 204);
    } finally {
      await b.agent.manager!.kill(d.sandboxId, AbortSignal.timeout(60_000));
    }
  });

  it("a drop while the copy is being published stops the publication and frees the copy (btrfs refuses to delete a subvolume being sent)", async () => {
    const d = spec({ memoryMib: 256, diskMib: 2048 });
    await a.agent.manager!.create(d, AbortSignal.timeout(120_000));
    // 1 GiB of incompressible data: the disk part's send lasts seconds, so the drop lands inside it.
    const w = await sh(a, d.sandboxId, "head -c 1G /dev/urandom > /home/user/big; echo rc=$?", "user", 120_000);
    assert.match(w.stdout, /rc=0/, w.stderr);
    const local = await a.agent.snapshots!.suspend(d.sandboxId, newSnapshotId(), { upload: false }, AbortSignal.timeout(300_000));
    const publishing = a.agent.snapshots!.publish(local.snapshotId, AbortSignal.timeout(300_000));
    publishing.catch(() => undefined);
    const tmp = join(blobDir, ".tmp");
    const written = async () => {
      let n = 0;
      for (const f of await readdir(tmp).catch(() => [] as string[])) if (f.endsWith(".part")) n += (await stat(join(tmp, f)).catch(() => ({ size: 0 }))).size;
      return n;
    };
    // The memory part stored (so the template parent was too) and the disk part under way: the send runs.
    const memoryStored = () => readdir(join(blobDir, "snapshots", local.snapshotId)).then((f) => f.some((n) => n.startsWith("memory.tar")), () => false);
    await waitFor(async () => (await memoryStored()) && (await written()) >= 16 * 1048576, "the publication to reach the disk part", 120_000, 20);
    await a.agent.snapshots!.dropLocal(local.snapshotId);
    await assert.rejects(publishing, "the publication of a dropped copy fails");
    assert.equal(await a.agent.snapshots!.hasLocal(local.snapshotId), false, "the copy is gone");
    const subvolumes = await exec("btrfs", ["subvolume", "list", a.agent.disks!.cache.mountPath], { timeoutMs: 30_000 });
    assert.doesNotMatch(subvolumes.stdout, new RegExp(`snapshots/${local.snapshotId}/`), "its disk subvolume is deleted");
    assert.equal(await written(), 0, "no part is left half-written in the blob store");
  });

    it("refuses a stream that fails its checksum (rejects_corrupted_stream)", async () => {
    // Node A has no copy of the fork snapshot: it must fetch, and one byte of the disk part is flipped.
    const disk = forkDesc.parts.find((p) => p.kind === "disk")!;
    const path = join(blobDir, disk.key);
    const buf = await readFile(path);
    const at = Math.floor(buf.length / 2);
    buf[at] = buf[at]! ^ 0xff;
    await writeFile(path, buf);
    await assert.rejects(
      a.agent.snapshots!.restore(restoreSpec(newSandboxId()), forkDesc, AbortSignal.timeout(300_000)),
      (e: Error & { code?: string }) => e.code === "failed_precondition" && /checksum/.test(e.message),
    );
    assert.equal(await a.agent.snapshots!.hasLocal(forkDesc.snapshotId), false, "nothing of the refused stream is kept");
  });

  it("fails closed when the disk stream's parent is nowhere (…fails_closed_without_parent_source)", async () => {
    const orphan = { ...desc2, parentUuid: "00000000-1111-2222-3333-444444444444" };
    await assert.rejects(
      a.agent.snapshots!.restore(restoreSpec(newSandboxId()), orphan, AbortSignal.timeout(300_000)),
      (e: Error & { code?: string }) => e.code === "failed_precondition" && /parent/.test(e.message),
    );
  });

  // Earlier versions stored the image as a plain tar, then as GNU tar piped through the zstd CLI.
  for (const [form, suffix, recompress] of [
    ["a plain tar", ".tar.enc", false],
    ["GNU tar through zstd", ".gnu.tar.zst.enc", true],
  ] as const) {
    it(`a memory part stored by an earlier version (${form}) still restores`, async () => {
      const mem = desc2.parts.find((p) => p.kind === "memory")!;
      assert.match(mem.key, /\/memory\.tar\.zst\.enc$/, "published zstd-compressed, then encrypted");
      // The same image as that version stored it, encrypted under the snapshot's data key.
      const dataKey = unwrapKey(parseClusterKey(KEY)!, desc2.wrappedKey!);
      const oldKey = mem.key.replace(/\.tar\.zst\.enc$/, suffix);
      const unzstd = spawn("zstd", ["-d", "-c"], { stdio: ["pipe", "pipe", "inherit"] });
      let tar: NodeJS.ReadableStream = unzstd.stdout;
      if (recompress) {
        const z = spawn("zstd", ["-1", "-q", "-c"], { stdio: ["pipe", "pipe", "inherit"] });
        unzstd.stdout.pipe(z.stdin);
        tar = z.stdout;
      }
      const stored = new FsBlobStore(blobDir).put(oldKey, tar.pipe(encryptStream(dataKey, oldKey)));
      await pipeline(createReadStream(join(blobDir, mem.key)), decryptStream(dataKey, mem.key), unzstd.stdin);
      const info = await stored;
      const old = { ...desc2, parts: desc2.parts.map((p) => (p.kind === "memory" ? { kind: "memory" as const, key: oldKey, sizeBytes: info.sizeBytes, sha256: info.sha256 } : p)) };
      await a.agent.snapshots!.dropLocal(desc2.snapshotId);
      const fid = newSandboxId();
      await a.agent.snapshots!.restore(restoreSpec(fid), old, AbortSignal.timeout(300_000));
      try {
        const c1 = await counter(a, fid);
        await new Promise((r) => setTimeout(r, 400));
        assert.ok((await counter(a, fid)) > c1, "the restored process counts on");
      } finally {
        await a.agent.manager!.kill(fid, AbortSignal.timeout(60_000));
        await a.agent.snapshots!.dropLocal(desc2.snapshotId);
      }
    });
  }

  it("encrypted parts and parent (template) streams hold no plaintext: no marker, no btrfs stream header", async () => {
    const all = await files(blobDir);
    assert.ok(all.some((f) => /\/snapshots\/.*\.enc$/.test(f)), "encrypted snapshot parts");
    assert.ok(all.some((f) => /\/parents\/[^/]+\.btrfs\.enc$/.test(f)), `an encrypted parent stream: ${all.join(", ")}`);
    assert.ok(!all.some((f) => /\/parents\/[^/]+\.btrfs$/.test(f)), "no plaintext parent stream");
    for (const f of all) {
      for (const needle of [MARKER, "btrfs-stream"]) {
        const r = await exec("grep", ["-c", "-a", needle, f], { allowFailure: true, timeoutMs: 60_000 });
        assert.equal(r.stdout.trim(), "0", `${f} contains ${needle} in plaintext`);
      }
    }
  });
});
