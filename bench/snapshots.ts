/**
 * Suspend / restore / fork latency vs a cold create, one node agent (own host scope, own
 * cache), idle sandboxes, real runc + CRIU 4.1.1 + btrfs, filesystem blob store.
 *   node --import tsx bench/snapshots.ts [iterations=5] [--encrypt]
 * Restore "from blob" drops the local copy first: the path a second node takes (download,
 * checksum, parent present, btrfs receive, CRIU restore).
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newExecutionId, newSandboxId } from "../src/core/ids.ts";
import { newSnapshotId } from "../src/store/snapshots.ts";
import { spec, startTestNode } from "../test/node/helpers.ts";

const n = Number(process.argv[2] ?? 5);
const encrypt = process.argv.includes("--encrypt");
const blobDir = await mkdtemp(join(tmpdir(), "space-bench-snap-"));
const node = await startTestNode({
  realEnvd: true,
  env: { SPACE_BLOB_URL: blobDir, SPACE_NODE_SLOT_CIDR: "10.251.32.0/20", ...(encrypt ? { SPACE_ENCRYPTION_KEY: randomBytes(32).toString("hex") } : {}) },
  deps: { hostScope: { bridge: "spsnbn0", nftTable: "space_snap_bench", vethPrefix: "vsx", cgroupParent: "space-snap-bench" } },
});
const m = node.agent.manager!;
const snaps = node.agent.snapshots!;
const sig = () => AbortSignal.timeout(300_000);
const r: Record<string, number[]> = { cold: [], suspend: [], suspendCapture: [], restoreLocal: [], restoreBlob: [], fork: [], bytes: [] };
const time = async <T>(k: string, fn: () => Promise<T>): Promise<T> => {
  const t = performance.now();
  const v = await fn();
  r[k]!.push(performance.now() - t);
  return v;
};
try {
  for (let i = 0; i < n; i++) {
    const s = spec();
    await time("cold", () => m.create(s, sig()));
    const d1 = await time("suspend", () => snaps.suspend(s.sandboxId, newSnapshotId(), { upload: true }, sig()));
    r.suspendCapture!.push(d1.timings.captureMs ?? 0);
    r.bytes!.push(d1.sizeBytes);
    await time("restoreLocal", () => snaps.restore({ ...s, executionId: newExecutionId() }, d1, sig()));
    const d2 = await snaps.suspend(s.sandboxId, newSnapshotId(), { upload: true }, sig());
    await snaps.dropLocal(d2.snapshotId);
    await time("restoreBlob", () => snaps.restore({ ...s, executionId: newExecutionId() }, d2, sig()));
    const fd = await snaps.checkpointLive(s.sandboxId, newSnapshotId(), { upload: false }, sig());
    const fid = newSandboxId();
    await time("fork", async () => {
      const f = await snaps.checkpointLive(s.sandboxId, newSnapshotId(), { upload: false }, sig());
      await snaps.restore({ ...s, sandboxId: fid, executionId: newExecutionId() }, f, sig());
    });
    await m.kill(fid, sig());
    await m.kill(s.sandboxId, sig());
    for (const d of [d1, d2, fd]) await snaps.dropLocal(d.snapshotId);
  }
  const q = (a: number[], p: number) => [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(p * a.length))]!;
  console.log(`snapshots bench: ${n} iterations, idle sandbox (256 MiB limit), encryption ${encrypt ? "on" : "off"}`);
  for (const [k, a] of Object.entries(r)) {
    if (k === "bytes") console.log(`  bytes stored per snapshot: median ${(q(a, 0.5) / 1048576).toFixed(1)} MiB`);
    else console.log(`  ${k.padEnd(15)} median ${q(a, 0.5).toFixed(0).padStart(5)} ms   p99 ${q(a, 0.99).toFixed(0).padStart(5)} ms`);
  }
} finally {
  await node.close();
  await rm(blobDir, { recursive: true, force: true });
}
