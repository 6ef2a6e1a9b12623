/**
 * Bursts (issue 24; the method of the ComputeSDK burst benchmark): N SDK creates at once,
 * each followed by its first `commands.run('echo hi')`; "all ready" is the wall time until
 * the last of the N answered. For each N, cold (no pool) and warm (a pool of N, waited full
 * before the burst), side by side in one run on one stack, with the per-sandbox median and
 * p99 and the warm/cold ratio.
 *
 *   npm run bench -- burst [--n 20,50,100] [--json]
 *
 * Starts the real stack (`space up` in a temp data dir) with defaults plus BENCH_ENV
 * (k=v,k=v); every sandbox is killed after its burst (not timed), the pool removed, and
 * each burst starts on a settled node: no sandbox left on it but the pool's (by its records)
 * and the machine idle. Without that, the teardown of the previous phase's sandboxes ran inside
 * the next burst (cold 100 after the N = 50 rows: 17.6 s, alone: 11.9 s).
 */
import { spawnSync } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Sandbox } from "e2b";
import { adminRequest, startStack, waitFor, type Stack } from "../test/support/stack.ts";
import { percentile } from "./support/stats.ts";

const round = (x: number) => Math.round(x);

/** Share of the machine's CPU time left idle over `ms`. */
async function idleShare(ms: number): Promise<number> {
  const read = async () => (await readFile("/proc/stat", "utf8")).split("\n")[0]!.split(/\s+/).slice(1).map(Number);
  const a = await read();
  await new Promise((r) => setTimeout(r, ms));
  const b = await read();
  const d = b.map((v, i) => v - (a[i] ?? 0));
  const total = d.reduce((x, y) => x + y, 0);
  return total > 0 ? ((d[3] ?? 0) + (d[4] ?? 0)) / total : 1;
}

/**
 * Waits (at most 2 minutes) until the node holds `resident` sandboxes (the warm pool's), btrfs
 * has finished deleting the disks of those that ended, and the machine is 90% idle over half a
 * second. The deletions run in the kernel's btrfs-cleaner at the next transaction commit (up to
 * 30 s after the kills): a cold burst of 100 started on an idle machine then met them, 16–20 ms
 * of CPU per sandbox of it (`.exp` harness, 2026-12-07).
 */
async function settle(stack: Stack, resident: number): Promise<void> {
  const records = join(stack.dataDir, "node", "sandboxes");
  const deadline = Date.now() + 120_000;
  let synced = false;
  while (Date.now() < deadline) {
    const left = (await readdir(records).catch(() => [])).filter((f) => f.endsWith(".json")).length;
    if (left > resident) {
      await new Promise((r) => setTimeout(r, 200));
      continue;
    }
    if (!synced) {
      spawnSync("btrfs", ["subvolume", "sync", join(stack.dataDir, "node", "cache")], { stdio: "ignore", timeout: Math.max(1, deadline - Date.now()) });
      synced = true;
    }
    if ((await idleShare(500)) >= 0.9) return;
  }
  console.warn("burst: the node did not settle within 2 minutes; measuring anyway");
}

async function burst(stack: Stack, n: number, pool: number) {
  await settle(stack, pool);
  const opts = { apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, apiKey: stack.apiKey, requestTimeoutMs: 300_000 };
  const t0 = performance.now();
  const results = await Promise.allSettled(
    Array.from({ length: n }, async () => {
      const sb = await Sandbox.create("base", opts);
      const r = await sb.commands.run("echo hi");
      if (r.stdout !== "hi\n") throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`);
      return { sb, ms: performance.now() - t0 };
    }),
  );
  const allReadyMs = performance.now() - t0;
  const ok = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failed = results.filter((r) => r.status === "rejected").map((r) => String((r as PromiseRejectedResult).reason).slice(0, 160));
  await Promise.allSettled(ok.map((o) => o.sb.kill()));
  const each = ok.map((o) => o.ms);
  return { allReadyMs: round(allReadyMs), p50Ms: round(percentile(each, 50)), p99Ms: round(percentile(each, 99)), failed: failed.length, firstFailure: failed[0] ?? "" };
}

async function main() {
  const { values } = parseArgs({ options: { n: { type: "string", default: "20,50,100" }, json: { type: "boolean", default: false } } });
  const sizes = values.n.split(",").map(Number);
  const env = Object.fromEntries((process.env.BENCH_ENV ?? "").split(",").filter(Boolean).map((kv) => kv.split("=", 2) as [string, string]));
  const stack = await startStack({ env });
  const rows: Array<Record<string, string | number>> = [];
  const ready = async () =>
    ((await adminRequest(stack, "GET", "/warm-pools/base")).body as { members?: Array<{ state: string }> }).members?.filter((m) => m.state === "ready").length ?? 0;
  try {
    // Not counted: the first create on the stack (the API's and the node's first use of each
    // path), which also has base's capture after boot made behind it; the cold bursts measure
    // what follows (unless BENCH_ENV turns SPACE_NODE_BOOT_CAPTURE off).
    await burst(stack, 1, 0);
    if (env.SPACE_NODE_BOOT_CAPTURE !== "false") {
      const file = join(stack.dataDir, "node", "boot-captures", "base.json");
      await waitFor(() => readFile(file).then(() => true, () => false), "base's capture after boot", 60_000, 100);
    }
    for (const n of sizes) {
      const cold = await burst(stack, n, 0);
      const put = await adminRequest(stack, "PUT", "/warm-pools/base", { size: n });
      if (put.status !== 200) throw new Error(`warm pool of ${n}: ${put.status} ${JSON.stringify(put.body)}`);
      await waitFor(async () => (await ready()) >= n, `${n} ready members`, 600_000, 500);
      const warm = await burst(stack, n, n);
      await adminRequest(stack, "DELETE", "/warm-pools/base");
      rows.push({ n, phase: "cold", ...cold });
      rows.push({ n, phase: `warm pool of ${n}`, ...warm, vsCold: Math.round((warm.allReadyMs / cold.allReadyMs) * 100) / 100 });
    }
  } finally {
    await stack.stop();
  }
  if (values.json) console.log(JSON.stringify(rows, null, 2));
  else {
    console.log(`${"N".padEnd(5)}${"phase".padEnd(18)}${"all ready ms".padEnd(14)}${"p50 ms".padEnd(9)}${"p99 ms".padEnd(9)}${"failed".padEnd(8)}warm/cold`);
    for (const r of rows) console.log(`${String(r.n).padEnd(5)}${String(r.phase).padEnd(18)}${String(r.allReadyMs).padEnd(14)}${String(r.p50Ms).padEnd(9)}${String(r.p99Ms).padEnd(9)}${String(r.failed).padEnd(8)}${r.vsCold ?? ""}${r.firstFailure ? `  first failure: ${r.firstFailure}` : ""}`);
  }
}

await main();
