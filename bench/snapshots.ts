/**
 * Suspend / restore / fork latency and bytes stored per snapshot, for an idle sandbox and
 * for one holding 256 MiB of dirty memory, on two node agents of this machine (own host
 * scopes and caches) sharing only a filesystem blob store; real runc + CRIU 4.1.1 + btrfs.
 *   npm run bench -- snapshots [iterations=5] [--encrypt] [--idle-only] [--no-slot-keep] [--no-staging]
 *
 * Per iteration (issue #25's rows, each with its phases): cold create on A (the baseline),
 * pause returned to the caller (memory + disk captured on the node), its publication to
 * the blob store behind it (suspend to durable = both; per GiB dirty for the dirty kind),
 * restore on A from its local copy (same node), suspend again with the upload inside the
 * call (the path before #25, for comparison in the same run) and restore on B, which never
 * held the snapshot (cross node: download, checksum, btrfs receive, CRIU restore; B pulls
 * the template parent once, in the warm-up iteration), a pause on B and a restore there at
 * once (an agent's pause-then-connect: the restore waits for the pause's release behind its
 * answer), then a fork on B (live checkpoint + restore as a new sandbox).
 * Each kind first runs one warm-up iteration, not counted (as the ttfc bench does): its
 * totals are printed on their own line. On this VM the first dirty one paid 0.7-1.6 s more
 * in CRIU's memwrite (its stats-dump), writing the image into fresh tmpfs pages.
 * `--no-slot-keep`: nodes with SPACE_NODE_SLOT_KEEP_MS=0 (a suspended sandbox's network slot
 * torn down at once, not kept for its restore there).
 * `--no-staging`: nodes with SPACE_NODE_SNAPSHOT_STAGING_MIB=0 (memory images dumped to the
 * node's disk, not into the staging tmpfs).
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newExecutionId, newSandboxId } from "../src/core/ids.ts";
import { newSnapshotId } from "../src/store/snapshots.ts";
import { sh, spec, startTestNode, type TestNode } from "../test/node/helpers.ts";
import { median, percentile } from "./support/stats.ts";

const n = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 5);
const encrypt = process.argv.includes("--encrypt");
const kinds = process.argv.includes("--idle-only") ? (["idle"] as const) : (["idle", "dirty 256 MiB"] as const);
const blobDir = await mkdtemp(join(tmpdir(), "space-bench-snap-"));
const key = encrypt ? { SPACE_ENCRYPTION_KEY: randomBytes(32).toString("hex") } : {};
const slotKeep = process.argv.includes("--no-slot-keep") ? { SPACE_NODE_SLOT_KEEP_MS: "0" } : {};
const staging = process.argv.includes("--no-staging") ? { SPACE_NODE_SNAPSHOT_STAGING_MIB: "0" } : {};
const nodes: TestNode[] = [];
const sig = () => AbortSignal.timeout(600_000);
// 256 MiB of non-zero bytes, every page written, held by a process that then sleeps.
const DIRTY = `nohup python3 -c "import time; b = bytearray(b'\\x5a') * (256 << 20); open('/tmp/dirty-ready', 'w').close(); time.sleep(1e9)" >/dev/null 2>&1 &`;

type Series = Record<string, number[]>;
const medians = (s: Series) => Object.fromEntries(Object.entries(s).map(([k, v]) => [k, median(v)]));

/** One row of issue #25's table: its totals and the medians of its phases. */
interface Row {
  total: number[];
  phases: Series;
}

async function run(kind: "idle" | "dirty 256 MiB"): Promise<{ rows: Record<string, Row>; bytes: number[]; warmUp: Record<string, number> }> {
  const [a, b] = nodes as [TestNode, TestNode];
  const rows: Record<string, Row> = {};
  const bytes: number[] = [];
  const warm: Record<string, Row> = {};
  let i = -1;
  const row = (k: string): Row => ((i < 0 ? warm : rows)[k] ??= { total: [], phases: {} });
  const phases = (k: string, t: Record<string, number> | undefined, prefix = "") => {
    for (const [p, v] of Object.entries(t ?? {})) (row(k).phases[`${prefix}${p}`] ??= []).push(v);
  };
  const time = async <T>(k: string, fn: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    const v = await fn();
    row(k).total.push(performance.now() - t);
    return v;
  };
  for (; i < n; i++) {
    const s = spec({ memoryMib: kind === "idle" ? 256 : 768 });
    const cold = await time("cold create", () => a.agent.manager!.create(s, sig()));
    phases("cold create", cold.timings);
    if (kind !== "idle") {
      await sh(a, s.sandboxId, DIRTY);
      for (let t = 0; (await sh(a, s.sandboxId, "test -e /tmp/dirty-ready")).exitCode !== 0; t++) {
        if (t > 600) throw new Error("the dirty-memory process did not start");
        await new Promise((res) => setTimeout(res, 100));
      }
    }
    // Pause as ECW/Native take it now: the capture is safe on the node, the caller is answered; the publication runs behind.
    const t0 = performance.now();
    const d1 = await time("pause returned to caller", () => a.agent.snapshots!.suspend(s.sandboxId, newSnapshotId(), { upload: false }, sig()));
    phases("pause returned to caller", d1.timings);
    const pub = await time("publish behind the pause", () => a.agent.snapshots!.publish(d1.snapshotId, sig()));
    phases("publish behind the pause", pub.timings);
    row("suspend to durable").total.push(performance.now() - t0);
    if (i >= 0) bytes.push(pub.sizeBytes);
    const local = await time("restore same node", () => a.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, d1, sig()));
    phases("restore same node", local.timings);
    // The path before #25, in the same run: the upload inside the suspend call.
    const d2 = await time("suspend with upload inside (before #25)", () => a.agent.snapshots!.suspend(s.sandboxId, newSnapshotId(), { upload: true }, sig()));
    phases("suspend with upload inside (before #25)", d2.timings);
    const cross = await time("restore cross node", () => b.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, d2, sig()));
    phases("restore cross node", cross.timings);
    const d3 = await b.agent.snapshots!.suspend(s.sandboxId, newSnapshotId(), { upload: false }, sig());
    const atOnce = await time("restore same node, at once after a pause", () => b.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, d3, sig()));
    phases("restore same node, at once after a pause", atOnce.timings);
    const fid = newSandboxId();
    const fork = await time("fork", async () => {
      // As the control plane forks: the capture names the fork, whose disk and slot it makes beside the dump.
      const f = await b.agent.snapshots!.capture(s.sandboxId, newSnapshotId(), { upload: false, restoreAs: [fid] }, sig());
      const st = await b.agent.snapshots!.restore({ ...s, sandboxId: fid, executionId: newExecutionId() }, f, sig());
      phases("fork", f.timings, "capture.");
      phases("fork", st.timings, "restore.");
      return f;
    });
    await b.agent.manager!.kill(fid, sig());
    await b.agent.manager!.kill(s.sandboxId, sig());
    await a.agent.snapshots!.dropLocal(d1.snapshotId);
    await a.agent.snapshots!.dropLocal(d2.snapshotId);
    await b.agent.snapshots!.dropLocal(d2.snapshotId);
    await b.agent.snapshots!.dropLocal(d3.snapshotId);
    await b.agent.snapshots!.dropLocal(fork.snapshotId);
  }
  return { rows, bytes, warmUp: Object.fromEntries(Object.entries(warm).map(([k, r]) => [k, Math.round(r.total[0]!)])) };
}

try {
  nodes.push(
    await startTestNode({
      realEnvd: true,
      env: { SPACE_BLOB_URL: blobDir, ...key, ...slotKeep, ...staging },
    }),
    await startTestNode({
      realEnvd: true,
      env: { SPACE_BLOB_URL: blobDir, ...key, ...slotKeep, ...staging },
    }),
  );
  console.log(`snapshots bench: ${n} iterations per kind, two nodes sharing a filesystem blob store, encryption ${encrypt ? "on" : "off"}, slot keep ${slotKeep.SPACE_NODE_SLOT_KEEP_MS === "0" ? "off" : "on"}, staging ${staging.SPACE_NODE_SNAPSHOT_STAGING_MIB === "0" ? "off" : "on"}`);
  for (const kind of kinds) {
    const { rows, bytes, warmUp } = await run(kind);
    console.log(`${kind}:`);
    console.log(`  warm-up iteration (not counted), ms: ${JSON.stringify(warmUp)}`);
    for (const [k, r] of Object.entries(rows)) {
      console.log(`  ${k.padEnd(40)}  median ${median(r.total).toFixed(0).padStart(5)} ms   p99 ${percentile(r.total, 99).toFixed(0).padStart(5)} ms`);
      if (Object.keys(r.phases).length) console.log(`    phases (medians, ms) ${JSON.stringify(medians(r.phases))}`);
    }
    if (kind !== "idle") {
      const perGiB = (k: string) => ((median(rows[k]!.total) * 4) / 1000).toFixed(2);
      console.log(`  per GiB dirty (median x 4): suspend to durable ${perGiB("suspend to durable")} s, suspend with upload inside (before #25) ${perGiB("suspend with upload inside (before #25)")} s`);
    }
    console.log(`  bytes stored per snapshot   median ${(median(bytes) / 1048576).toFixed(1)} MiB   max ${(Math.max(...bytes) / 1048576).toFixed(1)} MiB`);
    const ratio = (k: string) => (median(rows[k]!.total) / median(rows["cold create"]!.total)).toFixed(2);
    console.log(`  vs cold create (median): pause ${ratio("pause returned to caller")}x, restore same node ${ratio("restore same node")}x, cross node ${ratio("restore cross node")}x, fork ${ratio("fork")}x`);
  }
} finally {
  for (const node of nodes) await node.close();
  await rm(blobDir, { recursive: true, force: true });
}
