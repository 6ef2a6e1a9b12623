/**
 * Suspend / restore / fork latency and bytes stored per snapshot, for an idle sandbox and
 * for one holding 256 MiB of dirty memory, on two node agents of this machine (own host
 * scopes and caches) sharing only a filesystem blob store; real runc + CRIU 4.1.1 + btrfs.
 *   npm run bench -- snapshots [iterations=5] [--encrypt] [--idle-only]
 *
 * Per iteration: cold create on A (the baseline), suspend (memory + disk captured and
 * published: the durable path ECW pause takes), restore on A from its local copy (same
 * node), suspend again and restore on B, which never held the snapshot (cross node:
 * download, checksum, btrfs receive, CRIU restore; B pulls the template parent once, in
 * the first iteration), then a fork on B (live checkpoint + restore as a new sandbox).
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newExecutionId, newSandboxId } from "../src/core/ids.ts";
import { newSnapshotId } from "../src/store/snapshots.ts";
import { sh, spec, startTestNode, type TestNode } from "../test/node/helpers.ts";

const n = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 5);
const encrypt = process.argv.includes("--encrypt");
const kinds = process.argv.includes("--idle-only") ? (["idle"] as const) : (["idle", "dirty 256 MiB"] as const);
const blobDir = await mkdtemp(join(tmpdir(), "space-bench-snap-"));
const key = encrypt ? { SPACE_ENCRYPTION_KEY: randomBytes(32).toString("hex") } : {};
const nodes: TestNode[] = [];
const sig = () => AbortSignal.timeout(600_000);
// 256 MiB of non-zero bytes, every page written, held by a process that then sleeps.
const DIRTY = `nohup python3 -c "import time; b = bytearray(b'\\x5a') * (256 << 20); open('/tmp/dirty-ready', 'w').close(); time.sleep(1e9)" >/dev/null 2>&1 &`;

type Series = Record<string, number[]>;
const q = (a: number[], p: number) => [...a].sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor(p * a.length))]!;

async function run(kind: "idle" | "dirty 256 MiB"): Promise<Series> {
  const [a, b] = nodes as [TestNode, TestNode];
  const breakdown: Series = {};
  const forkBreakdown: Series = {};
  const r: Series = { cold: [], suspend: [], "suspend capture": [], "restore same node": [], "restore cross node": [], fork: [], bytes: [] };
  const time = async <T>(k: string, fn: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    const v = await fn();
    r[k]!.push(performance.now() - t);
    return v;
  };
  for (let i = 0; i < n; i++) {
    const s = spec({ memoryMib: kind === "idle" ? 256 : 768 });
    await time("cold", () => a.agent.manager!.create(s, sig()));
    if (kind !== "idle") {
      await sh(a, s.sandboxId, DIRTY);
      for (let t = 0; (await sh(a, s.sandboxId, "test -e /tmp/dirty-ready")).exitCode !== 0; t++) {
        if (t > 600) throw new Error("the dirty-memory process did not start");
        await new Promise((res) => setTimeout(res, 100));
      }
    }
    const d1 = await time("suspend", () => a.agent.snapshots!.suspend(s.sandboxId, newSnapshotId(), { upload: true }, sig()));
    r["suspend capture"]!.push(d1.timings.captureMs ?? 0);
    r.bytes!.push(d1.sizeBytes);
    const local = await time("restore same node", () => a.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, d1, sig()));
    for (const [k, v] of Object.entries(local.timings ?? {})) (breakdown[k] ??= []).push(v);
    const d2 = await a.agent.snapshots!.suspend(s.sandboxId, newSnapshotId(), { upload: true }, sig());
    await time("restore cross node", () => b.agent.snapshots!.restore({ ...s, executionId: newExecutionId() }, d2, sig()));
    const fid = newSandboxId();
    const fork = await time("fork", async () => {
      const f = await b.agent.snapshots!.capture(s.sandboxId, newSnapshotId(), { upload: false }, sig());
      const st = await b.agent.snapshots!.restore({ ...s, sandboxId: fid, executionId: newExecutionId() }, f, sig());
      for (const [k, v] of Object.entries(f.timings)) (forkBreakdown[`capture.${k}`] ??= []).push(v);
      for (const [k, v] of Object.entries(st.timings ?? {})) (forkBreakdown[`restore.${k}`] ??= []).push(v);
      return f;
    });
    await b.agent.manager!.kill(fid, sig());
    await b.agent.manager!.kill(s.sandboxId, sig());
    await a.agent.snapshots!.dropLocal(d1.snapshotId);
    await a.agent.snapshots!.dropLocal(d2.snapshotId);
    await b.agent.snapshots!.dropLocal(d2.snapshotId);
    await b.agent.snapshots!.dropLocal(fork.snapshotId);
  }
  const med = Object.fromEntries(Object.entries(breakdown).map(([k, v]) => [k, q(v, 0.5)]));
  console.log(`  ${kind}: same-node restore breakdown (medians, ms) ${JSON.stringify(med)}`);
  const forkMed = Object.fromEntries(Object.entries(forkBreakdown).map(([k, v]) => [k, q(v, 0.5)]));
  console.log(`  ${kind}: fork breakdown (medians, ms) ${JSON.stringify(forkMed)}`);
  return r;
}

try {
  nodes.push(
    await startTestNode({
      realEnvd: true,
      env: { SPACE_BLOB_URL: blobDir, ...key },
    }),
    await startTestNode({
      realEnvd: true,
      env: { SPACE_BLOB_URL: blobDir, ...key },
    }),
  );
  console.log(`snapshots bench: ${n} iterations per kind, two nodes sharing a filesystem blob store, encryption ${encrypt ? "on" : "off"}`);
  for (const kind of kinds) {
    const r = await run(kind);
    console.log(`${kind}:`);
    for (const [k, v] of Object.entries(r)) {
      if (k === "bytes") console.log(`  bytes stored per snapshot   median ${(q(v, 0.5) / 1048576).toFixed(1)} MiB   max ${(Math.max(...v) / 1048576).toFixed(1)} MiB`);
      else console.log(`  ${k.padEnd(26)}  median ${q(v, 0.5).toFixed(0).padStart(5)} ms   p99 ${q(v, 0.99).toFixed(0).padStart(5)} ms`);
    }
    const ratio = (k: string) => (q(r[k]!, 0.5) / q(r.cold!, 0.5)).toFixed(2);
    console.log(`  vs cold create (median): restore same node ${ratio("restore same node")}x, cross node ${ratio("restore cross node")}x, fork ${ratio("fork")}x`);
  }
} finally {
  for (const node of nodes) await node.close();
  await rm(blobDir, { recursive: true, force: true });
}
