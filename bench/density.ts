/**
 * Density on one node with the defaults (docs/capacity.md): idle sandboxes created
 * (`--batch` at a time) until the node refuses (429) or `--max`; host memory per sandbox
 * (MemAvailable before − after, over the count); command round trips (`commands.run('true')`,
 * `--commands` spread over the held sandboxes) p50/p99 beside the same on one sandbox before the
 * fill (the baseline, same run) and on the way at `--at` held (the fill pauses for them). The
 * commands run `--settle` seconds after the fill (or the pause): idle sandboxes, not ones still booting. Then, when the fill was refused: the settled node topped up
 * until it refuses again (a refusal under the boots' load may be memory pressure that passes);
 * create after kills on that full node (kill `--kills`, then as many creates at once: admitted
 * and how long); overfill past the cap (`--overfill` creates at once on the full node: memory is
 * the cap, measured, so the admitted ones beyond the room the node had when the burst came).
 * The idle node's CPU (node agent and sandboxes) is measured over the settle's last 10 s.
 *
 *   npm run bench -- density [--max 600] [--at 500] [--batch 10] [--commands 200] [--kills 5] [--overfill 20] [--settle 30] [--json]
 *
 * Starts the real stack (`space up` in a temp data dir) with the node's defaults — the test
 * harness's 200-slot /24 replaced by the default SPACE_NODE_MAX_SLOTS on a /22 of its own —
 * plus what BENCH_ENV (k=v,k=v) sets; every sandbox is killed at the end.
 */
import { mkdtempSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { RateLimitError, Sandbox } from "e2b";
import { loadConfig } from "../src/core/config.ts";
import { hostScopeFor, removeDataDir, startStack } from "../test/support/stack.ts";
import { pickSlotRange } from "../test/support/node-network-cleanup.ts";
import { processCpu } from "../test/support/proc-cpu.ts";
import { percentile } from "./support/stats.ts";

const round = (x: number) => Math.round(x * 10) / 10;
const meminfoMib = async (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(await readFile("/proc/meminfo", "utf8"))?.[1] ?? 0) / 1024;
const memAvailableMib = () => meminfoMib("MemAvailable");
const memTotalMib = () => meminfoMib("MemTotal");

/**
 * CPU (ms) used so far by this stack's processes, from /proc: the node agent's (`space up`
 * and its spawn server: SPACE_DATA_DIR is this run's) and the sandboxes' (envd and what runs
 * under it: the stack's cgroup parent in their cgroup path).
 */
async function stackCpuMs(dataDir: string, cgroupParent: string): Promise<{ agent: number; sandboxes: number }> {
  const out = { agent: 0, sandboxes: 0 };
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cgroup = await readFile(`/proc/${pid}/cgroup`, "utf8");
      const { ms } = processCpu(pid);
      if (cgroup.includes(`/${cgroupParent}/`)) out.sandboxes += ms;
      else if ((await readFile(`/proc/${pid}/environ`, "utf8")).split("\0").includes(`SPACE_DATA_DIR=${dataDir}`)) out.agent += ms;
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/** Creates `batch` at a time until the node refuses (429) or `held` reaches `max`. */
async function fill<T>(held: T[], create: () => Promise<T>, batch: number, max: number): Promise<{ added: number; refusal: string }> {
  let refusal = "";
  let added = 0;
  while (held.length < max && !refusal) {
    const b0 = performance.now();
    const results = await Promise.allSettled(Array.from({ length: Math.min(batch, max - held.length) }, create));
    for (const r of results) {
      if (r.status === "fulfilled") {
        held.push(r.value);
        added++;
      } else if (r.reason instanceof RateLimitError) refusal ||= r.reason.message;
      else throw r.reason;
    }
    // Progress on stderr: a fill of hundreds takes minutes.
    process.stderr.write(`density: ${held.length} held, batch ${Math.round(performance.now() - b0)} ms, load ${loadavg()[0]!.toFixed(1)}\n`);
  }
  return { added, refusal };
}

async function main() {
  const { values } = parseArgs({
    options: {
      max: { type: "string", default: "600" },
      batch: { type: "string", default: "10" },
      commands: { type: "string", default: "200" },
      kills: { type: "string", default: "5" },
      overfill: { type: "string", default: "20" },
      settle: { type: "string", default: "30" },
      at: { type: "string", default: "500" },
      json: { type: "boolean", default: false },
    },
  });
  const max = Number(values.max);
  const batch = Number(values.batch);
  const env = Object.fromEntries((process.env.BENCH_ENV ?? "").split(",").filter(Boolean).map((kv) => kv.split("=", 2) as [string, string]));
  const dataDir = mkdtempSync(join(tmpdir(), "space-bench-density-"));
  const scope = hostScopeFor(dataDir);
  const bridge = scope.SPACE_NODE_BRIDGE!;
  // The stack's settings the overfill row reads (the node's defaults, or what BENCH_ENV sets).
  const settings = loadConfig({}, env);
  const heartbeatMs = settings.SPACE_NODE_HEARTBEAT_MS;
  const targetPercent = settings.SPACE_CAPACITY_MEMORY_TARGET_PERCENT;
  const stack = await startStack({ dataDir, env: { SPACE_NODE_MAX_SLOTS: "1000", SPACE_NODE_SLOT_CIDR: pickSlotRange(dataDir, bridge, 22), ...env } });
  const opts = { apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, apiKey: stack.apiKey, requestTimeoutMs: 300_000 };
  const held: Sandbox[] = [];
  const create = (o: { retries?: number } = {}) => Sandbox.create("base", { ...opts, ...o, timeoutMs: 3_600_000 });
  const roundTrips = async (pool: readonly Sandbox[], n: number) => {
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const sb = pool[i % pool.length]!;
      const t0 = performance.now();
      await sb.commands.run("true");
      ms.push(performance.now() - t0);
    }
    return ms.sort((a, b) => a - b);
  };
  // What admission reads at that moment: host memory in use against the target, memory
  // pressure (PSI some avg10, as the node measures it) and the node's count while past its target.
  const nodeState = async () => {
    const total = await memTotalMib();
    const inUse = round(((total - (await memAvailableMib())) / total) * 100);
    const pressure = await readFile("/proc/pressure/memory", "utf8");
    const psi = (kind: string) => new RegExp(`${kind} avg10=([\\d.]+)`).exec(pressure)?.[1] ?? "?";
    const res = await fetch(`${stack.apiUrl}/admin/api/v1/nodes`, { headers: { authorization: `Bearer ${stack.adminToken}` } });
    const { nodes } = (await res.json()) as { nodes: Array<{ memory_full_slots: number | null }> };
    return `in use ${inUse}% (target ${targetPercent}%), pressure ${psi("some")}% (full ${psi("full")}%), full count ${nodes.map((n) => n.memory_full_slots ?? "none").join(",")}`;
  };
  const rows: Array<Record<string, string | number>> = [];
  try {
    // Baseline: one sandbox on an empty node.
    const first = await create();
    held.push(first);
    const baseline = await roundTrips([first], Number(values.commands));
    const before = await memAvailableMib();

    const settle = () => new Promise((r) => setTimeout(r, Number(values.settle) * 1000));
    const t0 = performance.now();
    // On the way: the same round trips at `--at` held, settled alike (the fill pauses for them).
    const at = Math.min(Number(values.at), max);
    let { refusal } = await fill(held, create, batch, at);
    let pausedMs = 0;
    let midway: { ms: number[]; load: number; held: number } | undefined;
    if (!refusal && at < max) {
      const p0 = performance.now();
      await settle();
      const load = loadavg()[0]!;
      midway = { ms: await roundTrips(held, Number(values.commands)), load, held: held.length };
      pausedMs = performance.now() - p0;
      ({ refusal } = await fill(held, create, batch, max));
    }
    const fillS = (performance.now() - t0 - pausedMs) / 1000;
    // Idle means after the boots: envd's first pulls and samples, the page cache, the load they left.
    // What the idle node costs is measured over the settle's last 10 s.
    const settleS = Number(values.settle);
    const windowS = Math.min(10, settleS);
    await new Promise((r) => setTimeout(r, (settleS - windowS) * 1000));
    const cpu0 = await stackCpuMs(dataDir, scope.SPACE_NODE_CGROUP_PARENT!);
    await new Promise((r) => setTimeout(r, windowS * 1000));
    const cpu1 = await stackCpuMs(dataDir, scope.SPACE_NODE_CGROUP_PARENT!);
    const settledLoad = loadavg()[0]!;
    const perSandboxMib = (before - (await memAvailableMib())) / Math.max(1, held.length - 1);
    const loaded = await roundTrips(held, Number(values.commands));
    rows.push({ row: "idle sandboxes held (defaults)", value: held.length, note: refusal ? `refused: ${refusal}` : `stopped at --max ${max}` });
    rows.push({ row: "fill time (s)", value: round(fillS), note: `${batch} at a time` });
    rows.push({ row: "host memory per idle sandbox (MiB)", value: round(perSandboxMib), note: "MemAvailable delta" });
    if (midway) rows.push({ row: `commands p50 / p99 (ms), ${midway.held} held`, value: `${round(percentile(midway.ms, 50))} / ${round(percentile(midway.ms, 99))}`, note: `${values.settle} s after they were created, load ${midway.load.toFixed(1)}` });
    const idleCpu = (k: "agent" | "sandboxes") => (cpu1[k] - cpu0[k]) / windowS;
    rows.push({
      row: "CPU of the idle node (ms/s)",
      value: round(idleCpu("agent") + idleCpu("sandboxes")),
      note: `node agent ${round(idleCpu("agent"))}, sandboxes ${round(idleCpu("sandboxes"))}; ${round(((idleCpu("agent") + idleCpu("sandboxes")) / held.length) * 1000)} µs/s per sandbox, over the settle's last ${windowS} s`,
    });
    rows.push({ row: "commands p50 / p99 (ms), full node", value: `${round(percentile(loaded, 50))} / ${round(percentile(loaded, 99))}`, note: `${values.settle} s after the fill, load ${settledLoad.toFixed(1)}; baseline 1 sandbox: ${round(percentile(baseline, 50))} / ${round(percentile(baseline, 99))}` });

    if (refusal) {
      // A refusal during the fill may be the kernel reclaiming under the boots' load (memory
      // pressure), not the budget: the settled node is topped up until it refuses on its own.
      const { added, refusal: full } = await fill(held, create, batch, max);
      rows.push({ row: "admitted once the fill settled", value: added, note: full ? `then refused: ${full}` : `stopped at --max ${max}` });
      if (full) {
        // Create after kills on the full node: each kill's room is free at once. "At once" is
        // the first attempt (no SDK retry); one refused is then created as a user's SDK would
        // (retrying on 429 after Retry-After), and the note says when the last got in.
        const kills = Number(values.kills);
        await Promise.all(held.splice(0, kills).map((s) => s.kill()));
        const state = await nodeState();
        const k0 = performance.now();
        const after = await Promise.allSettled(Array.from({ length: kills }, () => create({ retries: 0 })));
        const admitted = after.filter((r) => r.status === "fulfilled").length;
        for (const r of after) if (r.status === "fulfilled") held.push(r.value);
        const retried = await Promise.allSettled(after.filter((r) => r.status === "rejected").map(() => create()));
        for (const r of retried) if (r.status === "fulfilled") held.push(r.value);
        const later = retried.filter((r) => r.status === "fulfilled").length;
        rows.push({
          row: "create after kills on a full node",
          value: `${admitted} of ${kills} admitted at once`,
          note: `${later} more with the SDK's retries; all done in ${round(performance.now() - k0)} ms after the kills; the node after the kills: ${state}`,
        });

        // Overfill: a burst on the full node. Memory is the cap here, and it is measured: the
        // burst overfills by the sandboxes it admitted beyond the room the node had when it
        // came (host memory in use then, plus what each admitted one uses, against the
        // budget). The idle sandboxes already there keep growing meanwhile; that is not an
        // admission, so it is shown beside (in use two heartbeats later), not counted.
        const n = Number(values.overfill);
        const total = await memTotalMib();
        const budgetMib = (total * targetPercent) / 100;
        const usedBefore = total - (await memAvailableMib());
        const burst = await Promise.allSettled(Array.from({ length: n }, create));
        const got = burst.filter((r) => r.status === "fulfilled").length;
        for (const r of burst) if (r.status === "fulfilled") held.push(r.value);
        await new Promise((r) => setTimeout(r, 2 * heartbeatMs + 2000));
        const usedAfter = total - (await memAvailableMib());
        const per = Math.max(1, perSandboxMib);
        const over = Math.min(got, Math.max(0, Math.ceil((usedBefore + got * per - budgetMib) / per)));
        const pct = (mib: number) => `${round((mib / total) * 100)}%`;
        rows.push({
          row: "overfill past the cap",
          value: over,
          note: `${n} creates at once on the full node, ${got} admitted; host memory in use ${pct(usedBefore)} before, ${pct(usedAfter)} two heartbeats after (budget ${targetPercent}%)`,
        });
      }
    }
  } finally {
    await Promise.allSettled(held.map((s) => s.kill()));
    await stack.stop();
    removeDataDir(dataDir);
  }
  if (values.json) console.log(JSON.stringify(rows, null, 2));
  else for (const r of rows) console.log(`${String(r.row).padEnd(42)} ${String(r.value).padEnd(16)} ${r.note}`);
}

await main();
