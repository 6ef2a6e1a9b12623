/**
 * Time to first command with and without a warm pool, in one run on one stack:
 * SDK `Sandbox.create()` → first `commands.run('echo hi')` done. Median and p99 over N
 * sequential and M concurrent creates, cold first (no pool), then warm (pool of `size`,
 * waited full before each phase), and the cold/warm ratio.
 *
 *   [BENCH_ENV=k=v,…] node --import tsx bench/ttfc.ts [--sequential 50] [--concurrent 20] [--rounds 1] [--size 50] [--commands 50] [--podman 0] [--phases 7] [--bare 20] [--floor 300] [--postgres] [--json]
 *
 * Then a per-phase trace of one cold and one warm create and their first command (SDK → API →
 * store → node → envd → command): the SDK's times, and, when this bench started the stack, the
 * node's own breakdown from its record of the sandbox (`<data dir>/node/sandboxes/<id>.json`);
 * what the create took beyond the node is the API, the store, placement and the hops between.
 * And the command round trip (`commands.run('true')`, `--commands` times on one sandbox) through
 * the gateway and the node's proxy, beside its bare equivalent: the SDK straight to the
 * sandbox's envd (no gateway, no proxy).
 *
 * `--phases K` (a stack this bench started; 0 skips): the per-phase medians of K cold creates,
 * K warm creates and K first commands, read from the platform's own OpenTelemetry spans: a
 * second stack exports them (OTEL_EXPORTER_OTLP_ENDPOINT) to a receiver in this bench. That
 * stack pays the tracing's own cost, so its totals sit a little above the rows measured first.
 *
 * `--bare N` (root; 0 skips): the bare baseline of a cold create in the same run: `bench -- node
 * --n N`, which times `runc run` of the same rootfs until envd says it is ready, without SPACE.
 *
 * `--floor N` (0 skips): the client's own floor in the same run: `bench -- sdk-floor --n N`, the
 * e2b SDK against a server answering from prepared bytes, and the mean time of the
 * `bash -l -c true` every SDK command runs, timed inside the cold sandbox (a loop of 200): what
 * no server can take below.
 *
 * `--podman N` (a stack this bench started, podman installed): N × `podman run -d` of the same
 * rootfs (the node's `base` template, overlaid, `--network none`) + `podman exec … echo hi`, and
 * N × `podman exec … true` in one container, beside SPACE's rows in the same run.
 *
 * `--rounds R`: each concurrent phase is R bursts of `concurrent` creates (the warm pool refilled
 * before each warm burst), summarised together: one burst's median swings with what else the node
 * does at that moment.
 *
 * `--postgres`: the stack's store is a fresh database on SPACE_TEST_DATABASE_URL's server
 * (the scale-out configuration) instead of PGlite embedded in the API process.
 *
 * Targets E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY / SPACE_ADMIN_TOKEN when set;
 * otherwise starts the real stack (`space up` in a temp data dir). Sandboxes are killed
 * after each sample (not timed). A warm sample that missed the pool is counted (`cold`).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Sandbox } from "e2b";
import { exec } from "../src/core/exec.ts";
import { freshDb, type TestDb } from "../test/support/db.ts";
import { startStack, waitFor, type Stack } from "../test/support/stack.ts";
import { phasesOf, startOtlpReceiver, type Phase, type ReceivedSpan } from "../test/support/otlp-receiver.ts";
import { percentile } from "./support/stats.ts";

interface Sample {
  createMs: number;
  ttfcMs: number;
  /** Sequential warm samples: whether the create adopted (adoption counter moved). */
  adopted?: boolean;
}

function summarize(name: string, samples: Sample[], wallMs: number, failed: number, extra: Record<string, number> = {}) {
  const ttfc = samples.map((s) => s.ttfcMs);
  const create = samples.map((s) => s.createMs);
  return {
    name,
    n: samples.length,
    ttfcMedianMs: Math.round(percentile(ttfc, 50) * 10) / 10,
    ttfcP99Ms: Math.round(percentile(ttfc, 99) * 10) / 10,
    createMedianMs: Math.round(percentile(create, 50) * 10) / 10,
    wallMs: Math.round(wallMs),
    failed,
    ...extra,
  };
}

/**
 * Another bench's JSON (the text from its first line opening an object), run by the same runner
 * (scripts/bench.mjs: compiled), from the repository root `npm run bench` runs in.
 */
async function benchJson<T>(name: string, args: string[], timeoutMs: number): Promise<T> {
  const r = await exec(process.execPath, ["scripts/bench.mjs", name, ...args], { timeoutMs });
  return JSON.parse(r.stdout.slice(r.stdout.indexOf("\n{") + 1)) as T;
}

/** `bench -- sdk-floor --n N`: the e2b SDK against a server answering from prepared bytes. */
const sdkFloor = (n: number) =>
  benchJson<{ commandMs: { median: number }; createAndCommandMs: { median: number } }>("sdk-floor", ["--n", String(n), "--json"], 10 * 60_000);

/** Mean ms of `bash -l -c true` (the shell every SDK command runs) inside `sb`, over a loop of `n`. */
async function loginShellMs(sb: Sandbox, n: number): Promise<number> {
  const r = await sb.commands.run(`s=$(date +%s%N); for i in $(seq ${n}); do /bin/bash -l -c true; done; e=$(date +%s%N); echo $(( (e - s) / ${n} ))`);
  return Number(r.stdout.trim()) / 1e6;
}

/** `bench -- node --n N`'s bare baseline: `runc run` of the same rootfs until envd's word, and the node's own create. */
async function bareBaseline(n: number): Promise<{ runcToEnvdReadyMs: number; nodeCreateToReadyMs: number; runcRunMs: number }> {
  const out = await benchJson<{
    nodeCreateToReadyMs: { median: number };
    baselineBareRunc: { runcRunMs: { median: number }; runcRunToEnvdReadyEventMs: { median: number } };
  }>("node", ["--n", String(n)], 30 * 60_000);
  return {
    runcToEnvdReadyMs: out.baselineBareRunc.runcRunToEnvdReadyEventMs.median,
    runcRunMs: out.baselineBareRunc.runcRunMs.median,
    nodeCreateToReadyMs: out.nodeCreateToReadyMs.median,
  };
}

interface PhaseRow {
  path: string[];
  medianMs: number;
  p99Ms: number;
  /** In how many of the samples the phase appeared. */
  seen: number;
}

/** Per-phase medians over samples (each one trace's phases), in the first sample's order. */
function phaseMedians(samples: Phase[][]): PhaseRow[] {
  const byPath = new Map<string, { path: string[]; ms: number[]; order: number }>();
  samples.forEach((phases, i) =>
    phases.forEach((p, j) => {
      const key = p.path.join("\u0000");
      const row = byPath.get(key) ?? { path: p.path, ms: [], order: i * 1000 + j };
      row.ms.push(p.durationMs);
      byPath.set(key, row);
    }),
  );
  return [...byPath.values()]
    .sort((a, b) => a.order - b.order)
    .map((r) => ({ path: r.path, medianMs: percentile(r.ms, 50), p99Ms: percentile(r.ms, 99), seen: r.ms.length }));
}

async function main() {
  const { values } = parseArgs({
    options: {
      sequential: { type: "string", default: "50" },
      concurrent: { type: "string", default: "20" },
      rounds: { type: "string", default: "1" },
      size: { type: "string", default: "50" },
      commands: { type: "string", default: "50" },
      podman: { type: "string", default: "0" },
      phases: { type: "string", default: "7" },
      bare: { type: "string", default: "20" },
      floor: { type: "string", default: "300" },
      postgres: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
    },
  });
  let stack: Stack | null = null;
  let apiUrl = process.env.E2B_API_URL;
  let sandboxUrl = process.env.E2B_SANDBOX_URL;
  let apiKey = process.env.E2B_API_KEY;
  let adminToken = process.env.SPACE_ADMIN_TOKEN;
  let pg: TestDb | undefined;
  // 1 vCPU sandboxes so pool + adopted + refills fit a small machine (members count against capacity).
  // 20 concurrent creates plus a full pool exceed this 2-core node at the default 8x vCPU overcommit.
  const stackEnv: Record<string, string> = {
    SPACE_DEFAULT_VCPU: process.env.BENCH_VCPU ?? "1",
    SPACE_PLACEMENT_VCPU_OVERCOMMIT: process.env.BENCH_VCPU_OVERCOMMIT ?? "32",
    // BENCH_ENV=k=v,k=v: settings to compare (e.g. SPACE_NODE_WARM_DISKS=0), as bench -- density takes them.
    ...Object.fromEntries((process.env.BENCH_ENV ?? "").split(",").filter(Boolean).map((kv) => kv.split("=", 2) as [string, string])),
  };
  if (!apiUrl || !sandboxUrl || !apiKey || !adminToken) {
    if (values.postgres) pg = await freshDb("postgres", { migrate: false });
    if (pg) stackEnv.SPACE_DATABASE_URL = pg.url;
    stack = await startStack({ env: stackEnv });
    ({ apiUrl, sandboxUrl, apiKey, adminToken } = stack);
  }
  const opts = { apiUrl, sandboxUrl, apiKey, requestTimeoutMs: 300_000 };
  const adminOf = (url: string, token: string) => async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    if (!res.ok && res.status !== 404) throw new Error(`admin ${method} ${path}: ${res.status} ${await res.text()}`);
    return res.status === 204 || res.status === 404 ? null : ((await res.json()) as { members?: Array<{ state: string }> });
  };
  const admin = adminOf(apiUrl, adminToken);
  const readyOf = (a: typeof admin) => async () => ((await a("GET", "/warm-pools/base"))?.members ?? []).filter((m) => m.state === "ready").length;
  const ready = readyOf(admin);
  const adoptions = async () => {
    const text = await (await fetch(`${apiUrl}/metrics`)).text();
    return text
      .split("\n")
      .filter((l) => l.startsWith("space_warm_pool_adoptions_total{"))
      .reduce((a, l) => a + Number(l.split(" ").pop()), 0);
  };

  const one = async (): Promise<Sample> => {
    const t0 = performance.now();
    const sb = await Sandbox.create(opts);
    const t1 = performance.now();
    try {
      const r = await sb.commands.run("echo hi");
      if (r.stdout !== "hi\n") throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`);
      return { createMs: t1 - t0, ttfcMs: performance.now() - t0 };
    } finally {
      await sb.kill().catch(() => {});
    }
  };
  /** The node's record of a sandbox: its address and breakdown (only for a stack this bench started). */
  const nodeRecord = async (id: string) => {
    if (!stack) return undefined;
    const text = await readFile(join(stack.dataDir, "node", "sandboxes", `${id}.json`), "utf8").catch(() => undefined);
    return text === undefined ? undefined : (JSON.parse(text) as { address: string; envdPort: number; timings?: Record<string, number> });
  };
  /** One create and its first command, timed by phase; the sandbox is kept for the round trips. */
  /**
   * The first cold create of a template on a node boots it and has its capture after boot made
   * behind it (SPACE_NODE_BOOT_CAPTURE): the cold rows measure what follows, so they wait for it
   * (a stack this bench started, the setting on).
   */
  const captured = async (dataDir: string | undefined) => {
    if (!dataDir || stackEnv.SPACE_NODE_BOOT_CAPTURE === "false") return;
    const file = join(dataDir, "node", "boot-captures", "base.json");
    await waitFor(() => readFile(file).then(() => true, () => false), "base's capture after boot", 60_000, 100);
  };
  const trace = async () => {
    const t0 = performance.now();
    const sb = await Sandbox.create(opts);
    const t1 = performance.now();
    const r = await sb.commands.run("echo hi");
    const t2 = performance.now();
    if (r.stdout !== "hi\n") throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`);
    return { sb, createMs: t1 - t0, commandMs: t2 - t1, ttfcMs: t2 - t0, record: await nodeRecord(sb.sandboxId) };
  };
  type Trace = Awaited<ReturnType<typeof trace>>;
  const f = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? "n/a" : `${Math.round(x * 10) / 10} ms`);
  const traceLines = (name: string, t: Trace, adopted: boolean): string[] => {
    const n = t.record?.timings;
    const lines = [`  ${name}`, `    SDK Sandbox.create → 201              ${f(t.createMs)}`];
    if (n && !adopted) {
      const readiness = n.envdEventMs !== undefined ? "by envd's word" : "polled over HTTP";
      lines.push(`      node create-to-ready               ${f(n.totalMs)}`);
      // A cold create restores its template's capture after boot once the node has made it
      // (SPACE_NODE_BOOT_CAPTURE). The node's record tells a memory restore by its readiness
      // (sandbox-boot.ts): polled, by its /init itself (envdPollMs, no initMs).
      if (n.envdPollMs !== undefined && n.initMs === undefined)
        lines.push(`        restored from its template's capture: disk ${f(n.diskMs)} ∥ network slot ${f(n.slotMs)}; bundle ${f(n.bundleMs)}, runc restore ${f(n.runtimeStartMs)}, slot wait ${f(n.slotWaitMs)}, envd /init (its readiness) ${f(n.envdMs)}`);
      else lines.push(`        disk snapshot ${f(n.diskMs)} ∥ network slot ${f(n.slotMs)}; bundle ${f(n.bundleMs)}, runc run ${f(n.runtimeStartMs)}, slot wait ${f(n.slotWaitMs)}, envd ready ${f(n.envdMs)} (${readiness}), envd /init ${f(n.initMs)}`);
      lines.push(`      API, store, placement, hops        ${f(t.createMs - n.totalMs!)} (create − node)`);
    } else if (n) lines.push(`      a warm member adopted (its boot, ${f(n.totalMs)} on the node, happened before, off this path)`);
    else lines.push(`      (node breakdown: only for a stack this bench started)`);
    lines.push(`    first command (echo hi)               ${f(t.commandMs)}  SDK → gateway → envd → bash -l (the node's proxy between when the node is another process)`);
    lines.push(`    TTFC                                  ${f(t.ttfcMs)}`);
    return lines;
  };
  /** `n` × commands.run('true') on `sb`, in ms. */
  const roundTrips = async (sb: Sandbox, n: number) => {
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await sb.commands.run("true");
      out.push(performance.now() - t0);
    }
    return out.sort((a, b) => a - b);
  };

  /** podman of the same rootfs: `n` × run -d + exec (its TTFC), then `n` × exec `true` in one container. */
  const podman = async (rootfs: string, n: number) => {
    // Explicit limits: podman's defaults are above this machine's hard limits (crun: setrlimit EPERM).
    const limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"];
    const run = () =>
      exec("podman", ["run", "-d", "--rm", "--network", "none", ...limits, "--rootfs", `${rootfs}:O`, "/bin/sleep", "infinity"], { timeoutMs: 120_000 }).then((r) => r.stdout.trim());
    const rm = (id: string) => exec("podman", ["rm", "-f", "-t", "0", id], { timeoutMs: 120_000, allowFailure: true });
    const ttfc: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const id = await run();
      await exec("podman", ["exec", id, "/bin/sh", "-c", "echo hi"], { timeoutMs: 60_000 });
      ttfc.push(performance.now() - t0);
      await rm(id);
    }
    const id = await run();
    const trip: number[] = [];
    try {
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        await exec("podman", ["exec", id, "true"], { timeoutMs: 60_000 });
        trip.push(performance.now() - t0);
      }
    } finally {
      await rm(id);
    }
    const row = (name: string, xs: number[]) => ({ name, median: percentile(xs, 50), p99: percentile(xs, 99), n: xs.length });
    return [row("podman run -d + exec echo hi", ttfc), row("podman exec true", trip)];
  };

  const sequential = async (n: number, track = false) => {
    const out: Sample[] = [];
    let failed = 0;
    const w0 = performance.now();
    for (let i = 0; i < n; i++) {
      try {
        const a = track ? await adoptions() : 0;
        const sample = await one();
        if (track) sample.adopted = (await adoptions()) > a;
        out.push(sample);
      } catch (e) {
        failed++;
        process.stderr.write(`sequential sample ${i} failed: ${String(e).slice(0, 300)}\n`);
      }
    }
    return { out, failed, wallMs: performance.now() - w0 };
  };
  /** `rounds` bursts of `n` at once; `before` runs ahead of each burst, untimed. Wall time is summed over the bursts. */
  const concurrent = async (n: number, rounds: number, before: () => Promise<unknown> = async () => {}) => {
    const out: Sample[] = [];
    let wallMs = 0;
    for (let round = 0; round < rounds; round++) {
      await before();
      const w0 = performance.now();
      const settled = await Promise.allSettled(Array.from({ length: n }, () => one()));
      wallMs += performance.now() - w0;
      for (const r of settled) if (r.status === "rejected") process.stderr.write(`concurrent sample failed: ${String(r.reason).slice(0, 300)}\n`);
      out.push(...settled.flatMap((r) => (r.status === "fulfilled" ? [r.value] : [])));
    }
    return { out, failed: n * rounds - out.length, wallMs };
  };

  /**
   * `k` cold creates, `k` warm creates and their first commands on a second stack exporting
   * its spans to this bench: per-phase medians, and the SDK's own times around them.
   */
  const phaseRuns = async (k: number, env: Record<string, string>) => {
    const receiver = await startOtlpReceiver();
    const traced = await startStack({ env: { ...env, OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: "50" } });
    const o = { apiUrl: traced.apiUrl, sandboxUrl: traced.sandboxUrl, apiKey: traced.apiKey, requestTimeoutMs: 300_000 };
    const tAdmin = adminOf(traced.apiUrl, traced.adminToken);
    const tReady = readyOf(tAdmin);
    /** The root span named `name` that started in [from, to] (wall clock), once exported. */
    const rootIn = (test: (s: ReceivedSpan) => boolean, from: number, to: number) =>
      waitFor(() => receiver.spans.find((s) => !s.parentSpanId && test(s) && s.startMs >= from - 1 && s.startMs <= to + 1), "the sample's root span", 30_000, 20);
    const isCreate = (s: ReceivedSpan) => /^api POST \/(v2\/)?sandboxes$/.test(s.name);
    const isCommand = (s: ReceivedSpan) => s.name.startsWith("gateway ");
    const sample = async () => {
      const w0 = Date.now();
      const t0 = performance.now();
      const sb = await Sandbox.create(o);
      const t1 = performance.now();
      const w1 = Date.now();
      try {
        await sb.commands.run("true");
        const t2 = performance.now();
        const w2 = Date.now();
        const [create, command] = await Promise.all([rootIn(isCreate, w0, w1), rootIn(isCommand, w1, w2)]);
        // Settle: the node's span ends with the response's close, after the SDK has its answer.
        await new Promise((r) => setTimeout(r, 150));
        return { createMs: t1 - t0, commandMs: t2 - t1, create: phasesOf(receiver.spans, create), command: phasesOf(receiver.spans, command) };
      } finally {
        await sb.kill().catch(() => {});
      }
    };
    type S = Awaited<ReturnType<typeof sample>>;
    const summarise = (xs: S[]) => ({
      sdkCreateMs: percentile(xs.map((x) => x.createMs), 50),
      sdkCommandMs: percentile(xs.map((x) => x.commandMs), 50),
      create: phaseMedians(xs.map((x) => x.create)),
      command: phaseMedians(xs.map((x) => x.command)),
    });
    try {
      await tAdmin("DELETE", "/warm-pools/base");
      await sample(); // warm-up (template cache, JIT), not counted
      await captured(traced.dataDir);
      const cold: S[] = [];
      for (let i = 0; i < k; i++) cold.push(await sample());
      await tAdmin("PUT", "/warm-pools/base", { size: 3 });
      const full = () => waitFor(async () => (await tReady()) >= 3, "traced warm pool full", 10 * 60_000, 100);
      await full();
      await sample(); // warm-up of the adoption path
      const warm: S[] = [];
      for (let i = 0; i < k; i++) {
        await full();
        warm.push(await sample());
      }
      await tAdmin("DELETE", "/warm-pools/base");
      return { cold: summarise(cold), warm: summarise(warm) };
    } finally {
      await traced.stop();
      receiver.server.close();
    }
  };

  const nSeq = Number(values.sequential);
  const nConc = Number(values.concurrent);
  const rounds = Number(values.rounds);
  const size = Number(values.size);
  const nCommands = Number(values.commands);
  const nPodman = Number(values.podman);
  const podmanRows: Array<{ name: string; median: number; p99: number; n: number }> = [];
  const results: Array<ReturnType<typeof summarize>> = [];
  const traces: string[] = [];
  const trips: Array<{ name: string; median: number; p99: number; n: number }> = [];
  let phases: Awaited<ReturnType<typeof phaseRuns>> | undefined;
  let stackStopped = false;
  let tracedPg: TestDb | undefined;
  const nFloor = Number(values.floor);
  let loginShell: number | undefined;
  try {
    await admin("DELETE", "/warm-pools/base");
    await one(); // warm-up (template cache, JIT), not counted
    await captured(stack?.dataDir);
    const cold = await trace();
    try {
      traces.push(...traceLines("cold (no pool)", cold, false));
      const via = await roundTrips(cold.sb, nCommands);
      trips.push({ name: "through the gateway", median: percentile(via, 50), p99: percentile(via, 99), n: via.length });
      if (cold.record) {
        // The bare equivalent: the SDK straight to envd at the sandbox's address (the node's network).
        const direct = await Sandbox.connect(cold.sb.sandboxId, { ...opts, sandboxUrl: `http://${cold.record.address}:${cold.record.envdPort}` });
        const d = await roundTrips(direct, nCommands);
        trips.push({ name: "straight to envd (bare)", median: percentile(d, 50), p99: percentile(d, 99), n: d.length });
      }
      if (nFloor > 0) loginShell = await loginShellMs(cold.sb, 200);
    } finally {
      await cold.sb.kill().catch(() => {});
    }
    const cs = await sequential(nSeq);
    results.push(summarize(`cold sequential x${nSeq}`, cs.out, cs.wallMs, cs.failed));
    const cc = await concurrent(nConc, rounds);
    results.push(summarize(`cold concurrent x${nConc}${rounds > 1 ? ` x${rounds} rounds` : ""}`, cc.out, cc.wallMs, cc.failed));

    await admin("PUT", "/warm-pools/base", { size });
    await waitFor(async () => (await ready()) >= Math.min(size, nSeq), `warm pool of ${size} full`, 15 * 60_000, 500);
    await one(); // warm-up of the adoption path
    await waitFor(async () => (await ready()) >= Math.min(size, nSeq), `warm pool of ${size} full`, 15 * 60_000, 500);
    const aTrace = await adoptions();
    const warm = await trace();
    await warm.sb.kill().catch(() => {});
    traces.push(...traceLines(`warm (pool of ${size})`, warm, (await adoptions()) > aTrace));
    await waitFor(async () => (await ready()) >= Math.min(size, nSeq), `warm pool of ${size} full`, 15 * 60_000, 500);
    let a0 = await adoptions();
    const ws = await sequential(nSeq, true);
    results.push(summarize(`warm sequential x${nSeq}`, ws.out, ws.wallMs, ws.failed, { adopted: (await adoptions()) - a0 }));
    const adoptedOnly = ws.out.filter((x) => x.adopted);
    results.push(summarize(`  of which adopted`, adoptedOnly, ws.wallMs, 0));
    a0 = await adoptions();
    const wc = await concurrent(nConc, rounds, () =>
      waitFor(async () => (await ready()) >= Math.min(size, nConc), `warm pool refilled`, 15 * 60_000, 500),
    );
    results.push(summarize(`warm concurrent x${nConc}${rounds > 1 ? ` x${rounds} rounds` : ""}`, wc.out, wc.wallMs, wc.failed, { adopted: (await adoptions()) - a0 }));
    await admin("DELETE", "/warm-pools/base");
    if (nPodman > 0 && stack) podmanRows.push(...(await podman(join(stack.dataDir, "node", "cache", "templates", "base"), nPodman)));
    await stack?.stop();
    stackStopped = true;
    const nPhases = Number(values.phases);
    if (stack && nPhases > 0) {
      // The traced stack's store is of the same kind: a fresh Postgres database, or its own PGlite.
      if (pg) tracedPg = await freshDb("postgres", { migrate: false });
      phases = await phaseRuns(nPhases, tracedPg ? { ...stackEnv, SPACE_DATABASE_URL: tracedPg.url } : stackEnv);
    }
  } finally {
    if (!stackStopped) await stack?.stop();
    await pg?.drop();
    await tracedPg?.drop();
  }
  const nBare = Number(values.bare);
  const bare = nBare > 0 && process.getuid?.() === 0 ? await bareBaseline(nBare) : undefined;
  const floorRun = nFloor > 0 ? await sdkFloor(nFloor) : undefined;
  const floor =
    floorRun && loginShell !== undefined
      ? {
          sdkCommandMs: floorRun.commandMs.median,
          sdkCreateAndCommandMs: floorRun.createAndCommandMs.median,
          loginShellMs: Math.round(loginShell * 100) / 100,
          commandRoundTripMs: Math.round((floorRun.commandMs.median + loginShell) * 100) / 100,
          ttfcMs: Math.round((floorRun.createAndCommandMs.median + loginShell) * 100) / 100,
        }
      : undefined;
  const ratio = (cold: string, warm: string) => {
    const c = results.find((r) => r.name.startsWith(cold))!;
    const w = results.find((r) => r.name.startsWith(warm))!;
    return Math.round((c.ttfcMedianMs / w.ttfcMedianMs) * 10) / 10;
  };
  const ratios = { sequentialMedian: ratio("cold sequential", "warm sequential"), concurrentMedian: ratio("cold concurrent", "warm concurrent") };
  const store = stack ? (pg ? "postgres" : "pglite") : "external stack";
  const coldSeq = results.find((r) => r.name.startsWith("cold sequential"));
  const coldOverBare = bare && coldSeq ? { ttfc: Math.round((coldSeq.ttfcMedianMs / bare.runcToEnvdReadyMs) * 100) / 100, node: Math.round((bare.nodeCreateToReadyMs / bare.runcToEnvdReadyMs) * 100) / 100 } : undefined;
  const phaseLine = (r: PhaseRow) => `${"  ".repeat(r.path.length - 1)}${r.path[r.path.length - 1]!.padEnd(Math.max(8, 44 - 2 * r.path.length))} ${f(r.medianMs).padStart(9)}  (p99 ${f(r.p99Ms)}${r.seen < Number(values.phases) ? `, in ${r.seen} of ${values.phases}` : ""})`;
  const r1 = (t: { name: string; median: number; p99: number; n: number }) => ({ ...t, median: Math.round(t.median * 10) / 10, p99: Math.round(t.p99 * 10) / 10 });
  const roundTrip = trips.map(r1);
  const podmanOut = podmanRows.map(r1);
  const overPodman = podmanOut.length
    ? {
        cold: Math.round((podmanOut[0]!.median / results.find((r) => r.name.startsWith("cold sequential"))!.ttfcMedianMs) * 10) / 10,
        warm: Math.round((podmanOut[0]!.median / results.find((r) => r.name.startsWith("warm sequential"))!.ttfcMedianMs) * 10) / 10,
      }
    : undefined;
  if (values.json)
    process.stdout.write(
      JSON.stringify(
        {
          bench: "ttfc",
          store,
          results,
          coldOverWarm: ratios,
          trace: traces,
          commandRoundTripMs: roundTrip,
          ...(phases ? { phases } : {}),
          ...(bare ? { bareBaseline: bare, coldOverBare } : {}),
          ...(floor ? { clientFloor: floor } : {}),
          ...(overPodman ? { podman: podmanOut, podmanOverSpace: overPodman } : {}),
        },
        null,
        2,
      ) + "\n",
    );
  else {
    process.stdout.write(`TTFC: Sandbox.create → first commands.run('echo hi'), cold vs warm pool (same stack, store: ${store})\n`);
    for (const r of results) {
      const adopted = "adopted" in r ? `, adopted ${String((r as { adopted: number }).adopted)}/${r.n}` : "";
      process.stdout.write(
        `  ${r.name.padEnd(24)} median ${r.ttfcMedianMs} ms  p99 ${r.ttfcP99Ms} ms  (create median ${r.createMedianMs} ms, wall ${r.wallMs} ms, failed ${r.failed}${adopted})\n`,
      );
    }
    process.stdout.write(`  cold/warm median: sequential ${ratios.sequentialMedian}x, concurrent ${ratios.concurrentMedian}x\n`);
    process.stdout.write(`Trace: one create and its first command, by phase (SDK → API → store → node → envd → command)\n`);
    for (const l of traces) process.stdout.write(`${l}\n`);
    process.stdout.write(`Command round trip: commands.run('true') on one sandbox\n`);
    for (const t of roundTrip) process.stdout.write(`  ${t.name.padEnd(24)} median ${t.median} ms  p99 ${t.p99} ms  (n ${t.n})\n`);
    if (phases) {
      process.stdout.write(`Phases: medians of ${values.phases} samples from the platform's own OpenTelemetry spans (a second stack, tracing on)\n`);
      for (const [kind, p] of [["cold", phases.cold], ["warm", phases.warm]] as const) {
        const api = p.create[0];
        process.stdout.write(`  ${kind} create: SDK Sandbox.create → 201 ${f(p.sdkCreateMs)}; outside the API's span (SDK, connection, JSON) ${f(p.sdkCreateMs - (api?.medianMs ?? NaN))}\n`);
        for (const r of p.create) process.stdout.write(`    ${phaseLine(r)}\n`);
        const gw = p.command[0];
        process.stdout.write(`  its first command, commands.run('true'): SDK ${f(p.sdkCommandMs)}; outside the gateway's span ${f(p.sdkCommandMs - (gw?.medianMs ?? NaN))}\n`);
        for (const r of p.command) process.stdout.write(`    ${phaseLine(r)}\n`);
      }
      process.stdout.write(`  (the gateway's span, and the node proxy's under it when the node is another process, hold envd and the command: their bare figure is "straight to envd" above)\n`);
    }
    if (bare && coldOverBare) {
      process.stdout.write(`Bare baseline, same run: bench -- node --n ${values.bare} (the same rootfs, no SPACE)\n`);
      process.stdout.write(`  runc run ${f(bare.runcRunMs)}; runc run → envd ready (its word on the FIFO) ${f(bare.runcToEnvdReadyMs)}; the node's create-to-ready ${f(bare.nodeCreateToReadyMs)}\n`);
      process.stdout.write(`  cold sequential TTFC over bare runc + envd: ${coldOverBare.ttfc}x; the node's create-to-ready over it: ${coldOverBare.node}x\n`);
    }
    if (floor) {
      process.stdout.write(`The client's floor, same run: bench -- sdk-floor --n ${nFloor} (the e2b SDK against a server answering from prepared bytes)\n`);
      process.stdout.write(`  commands.run('true') ${f(floor.sdkCommandMs)}; Sandbox.create → commands.run('echo hi') ${f(floor.sdkCreateAndCommandMs)} (medians)\n`);
      process.stdout.write(`  bash -l -c true inside the sandbox (the shell every SDK command runs), mean of 200: ${f(floor.loginShellMs)}\n`);
      process.stdout.write(`  so no server here gives a command round trip under ${f(floor.commandRoundTripMs)}, nor a TTFC under ${f(floor.ttfcMs)}\n`);
    }
    if (overPodman) {
      process.stdout.write(`Podman, same rootfs (overlaid), --network none, same run\n`);
      for (const t of podmanOut) process.stdout.write(`  ${t.name.padEnd(28)} median ${t.median} ms  p99 ${t.p99} ms  (n ${t.n})\n`);
      process.stdout.write(`  podman run+exec over SPACE sequential TTFC median: cold ${overPodman.cold}x, warm ${overPodman.warm}x\n`);
    }
  }
}

await main();
