/**
 * The control plane alone on real Postgres (SPACE_TEST_DATABASE_URL; each part makes its own
 * database), with simulated nodes (issue #24, "Beyond one machine, simulated"):
 *
 * 1. placement: DirectSubstrate.decide over 100 / 1,000 / 10,000 `nodes` rows written by the
 *    store's registration (the directory read + the decision, as a create pays it), the pure
 *    decision alone, and the template's environment binding a create reads first.
 * 2. dispatcher: a backlog of no-op Native operations, claimed and completed by one
 *    dispatcher; operations/s.
 * 3. API: `space api` replicas (1, 2, 3, real processes sharing the database) in front of
 *    simulated nodes: each is the real node-api app (test/substrate/memory-node.ts) over an
 *    in-memory sandbox manager that answers creates at once, registered and heartbeating
 *    through the real HTTP path (registration with verify, then heartbeats). Plain-HTTP ECW
 *    create + kill loops, spread over the replicas; creates/s, create latency, and the 2/3
 *    replica ratios to 1, all in the same run.
 *
 *   npm run bench -- control-plane [placement|dispatcher|api ...]   (default: all three)
 *
 * Knobs: SPACE_BENCH_SECONDS (per API row, default 8), SPACE_BENCH_CONCURRENCY (create loops,
 * default 64), SPACE_BENCH_SIM_NODES (default 8), SPACE_BENCH_PAD_NODES (full node rows added
 * to the API part's directory, which placement reads and rejects; default 0), SPACE_BENCH_LIVE
 * (running sandboxes of another tenant held on those pad nodes, as a fleet's store holds
 * them, written in SQL; default 0),
 * SPACE_BENCH_OPERATIONS (dispatcher backlog, default 3000), SPACE_BENCH_TENANTS (the loops spread over
 * this many tenants, one API key each, default 16: one tenant's creates are serialised by its
 * quota admission, see docs/scale.md).
 */
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { freshDb, type TestDb } from "../test/support/db.ts";
import { freePort } from "../test/support/stack.ts";
import { runSpace, type SpaceProcess } from "../test/support/space-process.ts";
import { processCpu } from "../test/support/proc-cpu.ts";
import { MemoryNode } from "../test/substrate/memory-node.ts";
import type { NodeInventory } from "../src/contract/node-api.ts";
import type { NodeId } from "../src/core/ids.ts";
import { decidePlacement } from "../src/substrate/placement.ts";
import { DirectSubstrate } from "../src/substrate/direct/direct-substrate.ts";
import { CachedNodeDirectory } from "../src/substrate/cached-node-directory.ts";
import { believedCapacityLedger, storeCapacityLedger } from "../src/substrate/capacity.ts";
import { StoreNodeDirectory, StoreTemplates, templateBinding } from "../src/sandboxes/queries.ts";
import { registerNode, type NodeRegistration } from "../src/store/nodes.ts";
import { enqueueOperation } from "../src/store/operations.ts";
import { createTenant } from "../src/store/tenants.ts";
import { startDispatcher } from "../src/controller/dispatcher.ts";
import { createControlPlaneLink } from "../src/node/ctl/registration.ts";
import { startHeartbeat } from "../src/node/ctl/heartbeat.ts";
import { median, percentile } from "./support/stats.ts";

const parts = process.argv.slice(2).length ? process.argv.slice(2) : ["placement", "dispatcher", "api"];
const SECONDS = Number(process.env.SPACE_BENCH_SECONDS ?? 8);
const CONCURRENCY = Number(process.env.SPACE_BENCH_CONCURRENCY ?? 64);
const SIM_NODES = Number(process.env.SPACE_BENCH_SIM_NODES ?? 8);
const PAD_NODES = Number(process.env.SPACE_BENCH_PAD_NODES ?? 0);
const LIVE = Number(process.env.SPACE_BENCH_LIVE ?? 0);
const OPERATIONS = Number(process.env.SPACE_BENCH_OPERATIONS ?? 3000);
const TENANTS = Number(process.env.SPACE_BENCH_TENANTS ?? 16);
const ENVS = ["sha256:aaaaaaaaaaaaaaaa", "sha256:bbbbbbbbbbbbbbbb"];
const quiet = pino({ level: "silent" });

const stats = (xs: number[], digits = 2) =>
  `median ${median(xs).toFixed(digits)} ms, p99 ${percentile(xs, 99).toFixed(digits)} ms (n=${xs.length})`;

console.log(`control plane bench: ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(1)} at start`);

/** A node row as a real node registers it: 64 vCPU, 256 GiB, both environments' templates; `full` reports memory pressure, which placement refuses. */
function simRow(i: number, full = false): NodeRegistration {
  const capacity = { vcpu: 64, memoryMib: 262_144, diskMib: 2_000_000, networkSlots: 300 };
  return {
    id: randomUUID() as NodeId,
    name: `sim-${String(i).padStart(5, "0")}`,
    // Loopback, port 1: never contacted, and nothing leaves the machine if it were.
    address: `http://127.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:1`,
    nodeGroup: `g${i % 4}`,
    labels: { zone: `z${i % 3}`, tier: i % 10 === 0 ? "gpu" : "cpu" },
    capacity,
    used: full
      ? { ...capacity, sandboxes: 300, memoryPressure: 100 }
      : { vcpu: (i * 7) % 64, memoryMib: (i * 997) % 200_000, diskMib: 0, networkSlots: (i * 13) % 300, sandboxes: (i * 13) % 300 },
    usableEnvironments: [ENVS[i % 2]!],
    templates: [{ templateId: "base", rootfsSizeMib: 451, environment: ENVS[i % 2]! }],
  };
}

/** Registers rows through the store, a few at a time on the pool. */
async function addRows(db: TestDb, from: number, to: number, full = false): Promise<void> {
  const ids = Array.from({ length: to - from }, (_, k) => from + k);
  for (let k = 0; k < ids.length; k += 50) await Promise.all(ids.slice(k, k + 50).map((i) => registerNode(db.db, simRow(i, full))));
}

async function placement(): Promise<void> {
  const db = await freshDb("postgres");
  try {
    const work = { templateId: "base", vcpu: 2, memoryMib: 1024, diskMib: 2048 };
    let have = 0;
    for (const n of [100, 1000, 10_000]) {
      await addRows(db, have, n);
      have = n;
      const dir = new StoreNodeDirectory(db.db);
      // As `space api` builds it (src/cli/processes.ts): the store's capacity ledger, believed as long as the snapshot.
      const sub = new DirectSubstrate({ nodes: dir, internalToken: "x", ledger: storeCapacityLedger(db.db) });
      const cached = new DirectSubstrate({
        nodes: new CachedNodeDirectory(dir, 1000),
        internalToken: "x",
        ledger: believedCapacityLedger(storeCapacityLedger(db.db), 1000),
      });
      const rounds = n >= 10_000 ? 50 : 200;
      const timed = async (fn: () => unknown, count: number) => {
        const t: number[] = [];
        for (let i = 0; i < count; i++) {
          const t0 = performance.now();
          await fn();
          t.push(performance.now() - t0);
        }
        return t;
      };
      /** Back to back for `ms`, as a busy replica decides: the snapshot's refreshes fall in the figures. */
      const during = async (fn: () => unknown, ms: number) => {
        const t: number[] = [];
        const end = performance.now() + ms;
        while (performance.now() < end) {
          const t0 = performance.now();
          await fn();
          t.push(performance.now() - t0);
        }
        return t;
      };
      const decideOn = (s: DirectSubstrate) => () => s.decide({ sandboxId: "s", ...work }, AbortSignal.timeout(30_000));
      const entries = await dir.list();
      const full = await timed(decideOn(sub), rounds);
      const onSnapshot = await during(decideOn(cached), 3000);
      const pure = await timed(() => decidePlacement(entries, work, { gate: "off" }), rounds * 2);
      const binding = await timed(() => templateBinding(db.db, "base"), rounds);
      const templates = new StoreTemplates(db.db);
      const bindingBelieved = await during(() => templates.binding("base"), 3000);
      console.log(`placement, ${n} nodes: decision reading every row (SPACE_PLACEMENT_DIRECTORY_MAX_AGE_MS=0) ${stats(full)}`);
      console.log(`placement, ${n} nodes: decision on the directory snapshot (=1000), back to back for 3 s ${stats(onSnapshot)}`);
      console.log(`placement, ${n} nodes:   the decision alone (decidePlacement) ${stats(pure)}`);
      console.log(`placement, ${n} nodes: template environment binding, read each time ${stats(binding)}`);
      console.log(`placement, ${n} nodes: template environment binding, believed 1 s, back to back for 3 s ${stats(bindingBelieved)}`);
    }
  } finally {
    await db.drop();
  }
}

async function dispatcher(): Promise<void> {
  const db = await freshDb("postgres");
  try {
    const tenant = await createTenant(db.db, { name: "bench" });
    for (let k = 0; k < OPERATIONS; k += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, OPERATIONS - k) }, (_, j) =>
          enqueueOperation(db.db, { tenantId: tenant.id, kind: "bench.noop", request: { i: k + j } }),
        ),
      );
    }
    let claimed = 0;
    let firstClaimAt = 0;
    let completed = 0;
    const t0 = performance.now();
    const d = await startDispatcher({
      db: db.db,
      log: quiet,
      config: { SPACE_CONTROLLER_TICK_MS: 25, SPACE_CONTROLLER_CLAIM_LIMIT: 16, SPACE_CONTROLLER_CLAIM_STALE_MS: 60_000 },
      handlers: {
        "bench.noop": async () => {
          if (!claimed++) firstClaimAt = performance.now();
          return null;
        },
      },
    });
    // Completion is the row's `succeeded` state, read from the store (the handler returning is not enough).
    for (;;) {
      const r = await db.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM operations WHERE state = 'succeeded'`);
      completed = r.n;
      if (completed >= OPERATIONS) break;
      if (performance.now() - t0 > 300_000) throw new Error(`dispatcher completed ${completed} of ${OPERATIONS} in 300 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const wall = (performance.now() - t0) / 1000;
    await d.stop();
    console.log(
      `dispatcher: ${OPERATIONS} queued no-op operations claimed and completed in ${wall.toFixed(2)} s: ` +
        `${(OPERATIONS / wall).toFixed(0)} operations/s (first claim after ${(firstClaimAt - t0).toFixed(0)} ms)`,
    );
  } finally {
    await db.drop();
  }
}

/** CPU ms used so far: the API replicas, every `postgres` process of the machine, and this process (client and simulated nodes). */
function cpuNow(replicas: readonly Replica[]): { api: number; postgres: number; bench: number } {
  let postgres = 0;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const s = processCpu(pid);
    if (s.comm === "postgres") postgres += s.ms;
  }
  const u = process.cpuUsage();
  return { api: replicas.reduce((sum, r) => sum + processCpu(r.proc.child.pid ?? 0).ms, 0), postgres, bench: (u.user + u.system) / 1000 };
}

const cpuSince = (a: ReturnType<typeof cpuNow>, b: ReturnType<typeof cpuNow>, per: number) => ({
  api: (b.api - a.api) / per,
  postgres: (b.postgres - a.postgres) / per,
  bench: (b.bench - a.bench) / per,
});

/** A simulated node: the real node-api app over the memory manager, with a large capacity and `base` in its cache. */
class SimNode extends MemoryNode {
  override inventory(): NodeInventory {
    const n = this.sandboxes.size;
    return {
      nodeId: this.nodeId,
      name: `cpsim-${this.nodeId.slice(0, 8)}`,
      runtime: "runc",
      capacity: { networkSlots: 100_000, vcpu: 100_000, memoryMib: 100_000_000, diskMib: 1_000_000_000 },
      used: { networkSlots: n, vcpu: n * 2, memoryMib: n * 512, diskMib: n * 1024, sandboxes: n },
      usableEnvironments: [ENVS[0]!],
      templates: [{ templateId: "base", rootfsSizeMib: 451, environment: ENVS[0]! }],
    };
  }
}

interface Replica {
  url: string;
  proc: SpaceProcess;
}

async function api(): Promise<void> {
  const db = await freshDb("postgres");
  const dir = mkdtempSync(join(tmpdir(), "cpsim-api-"));
  const adminToken = `adm_${randomBytes(12).toString("hex")}`;
  const internalToken = `int_${randomBytes(12).toString("hex")}`;
  const replicas: Replica[] = [];
  const nodes: SimNode[] = [];
  const beats: Array<{ stop(): Promise<void> }> = [];
  try {
    for (let i = 0; i < 3; i++) {
      const [port, gw] = [await freePort(), await freePort()];
      const proc = runSpace(["api"], {
        SPACE_DATA_DIR: dir,
        SPACE_BLOB_URL: join(dir, "blobs"),
        SPACE_DATABASE_URL: db.url,
        SPACE_ADMIN_TOKEN: adminToken,
        SPACE_INTERNAL_TOKEN: internalToken,
        SPACE_LOG_LEVEL: "info",
        SPACE_API_PORT: String(port),
        SPACE_GATEWAY_PORT: String(gw),
        // The limiter stays on (its round trip is part of a create) but does not cap the bench.
        SPACE_RATE_LIMIT_CREATES_PER_S: "1000000",
        SPACE_RATE_LIMIT_CREATE_BURST: "1000000",
        SPACE_RATE_LIMIT_KEY_CREATES_PER_S: "1000000",
        SPACE_RATE_LIMIT_KEY_CREATE_BURST: "1000000",
        SPACE_QUOTA_SANDBOXES: "10000000",
        SPACE_QUOTA_VCPU: "100000000",
        SPACE_QUOTA_MEMORY_MIB: "2000000000",
        SPACE_QUOTA_DISK_MIB: "2000000000",
      });
      replicas.push({ url: `http://127.0.0.1:${port}`, proc });
    }
    await Promise.all(replicas.map((r) => r.proc.waitFor("api listening", 120_000)));
    if (PAD_NODES) await addRows(db, 0, PAD_NODES, true);
    if (LIVE) {
      if (!PAD_NODES) throw new Error("SPACE_BENCH_LIVE needs SPACE_BENCH_PAD_NODES: the live sandboxes are held on the pad nodes");
      const other = await createTenant(db.db, { name: "cpsim-fleet" });
      await db.db.execute(
        `WITH pad AS (SELECT array_agg(id) AS ids FROM nodes WHERE name LIKE 'sim-%')
         INSERT INTO sandboxes (id, tenant_id, template_id, state, node_id, vcpu, memory_mib, disk_mib, started_at)
         SELECT substr(md5(g::text), 1, 20), $1, 'base', 'running', pad.ids[1 + g % array_length(pad.ids, 1)], 2, 512, 1024, now()
           FROM generate_series(1, $2::int) g, pad`,
        [other.id, LIVE],
      );
      await db.db.execute(`ANALYZE sandboxes`);
    }
    for (let i = 0; i < SIM_NODES; i++) {
      const node = new SimNode(randomUUID(), internalToken, quiet);
      await node.listen();
      const link = createControlPlaneLink({
        controlUrl: replicas[i % replicas.length]!.url,
        token: internalToken,
        address: () => node.url,
        nodeGroup: "default",
        labels: {},
        version: "bench",
        logger: quiet,
      });
      await link.registerUntil(async () => node.inventory(), Date.now() + 60_000);
      beats.push(startHeartbeat({ intervalMs: 1000, inventory: async () => node.inventory(), publish: (inv) => link.publish(inv), logger: quiet }));
      nodes.push(node);
    }
    const admin = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${replicas[0]!.url}/admin/api/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(body ?? {}),
      });
      if (!r.ok) throw new Error(`${method} ${path} → ${r.status} ${await r.text()}`);
      return (await r.json()) as Record<string, string>;
    };
    const apiKeys: string[] = [];
    for (let t = 0; t < TENANTS; t++) {
      const tenant = await admin("POST", "/tenants", { name: `cpsim-bench-${t}` });
      apiKeys.push((await admin("POST", `/tenants/${tenant.id}/keys`, {})).key!);
    }

    /** Committed transactions in the bench database (each statement outside a transaction is one), once the statistics are flushed. */
    const commits = async () => {
      await new Promise((r) => setTimeout(r, 1500));
      const r = await db.db.one<{ n: string }>(`SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()`);
      return Number(r.n);
    };
    const row = async (k: number, seconds = SECONDS, print = true): Promise<number> => {
      const urls = replicas.slice(0, k).map((r) => r.url);
      const lat: number[] = [];
      const kills: number[] = [];
      const errors = new Map<string, number>();
      let created = 0;
      let deadline = 0;
      const loop = async (w: number) => {
        const apiKey = apiKeys[w % apiKeys.length]!;
        let turn = w;
        while (performance.now() < deadline) {
          const url = urls[turn++ % urls.length]!;
          const t0 = performance.now();
          const r = await fetch(`${url}/sandboxes`, {
            method: "POST",
            headers: { "x-api-key": apiKey, "content-type": "application/json" },
            body: JSON.stringify({ templateID: "base", timeout: 300 }),
          });
          const body = (await r.json()) as { sandboxID?: string; message?: string };
          if (r.status !== 201) {
            const key = `${r.status} ${body.message ?? ""}`.slice(0, 160);
            errors.set(key, (errors.get(key) ?? 0) + 1);
            continue;
          }
          lat.push(performance.now() - t0);
          created++;
          const t1 = performance.now();
          const d = await fetch(`${url}/sandboxes/${body.sandboxID}`, { method: "DELETE", headers: { "x-api-key": apiKey } });
          await d.arrayBuffer();
          if (d.status === 204 || d.status === 200) kills.push(performance.now() - t1);
          else errors.set(`kill ${d.status}`, (errors.get(`kill ${d.status}`) ?? 0) + 1);
        }
      };
      const commits0 = await commits();
      const cpu0 = cpuNow(replicas);
      const t0 = performance.now();
      deadline = t0 + seconds * 1000;
      await Promise.all(Array.from({ length: CONCURRENCY }, (_, w) => loop(w)));
      const wall = (performance.now() - t0) / 1000;
      const cpu = cpuSince(cpu0, cpuNow(replicas), Math.max(1, created));
      const rate = created / wall;
      const perCreate = ((await commits()) - commits0) / Math.max(1, created);
      if (print) console.log(
        `api, ${k} replica${k > 1 ? "s" : ""}: ${rate.toFixed(0)} creates/s (create + kill, ${CONCURRENCY} loops, ${TENANTS} tenants, ${wall.toFixed(1)} s); ` +
          `create ${stats(lat, 1)}; kill ${stats(kills, 1)}; ` +
          `${perCreate.toFixed(1)} Postgres transactions per create + kill (heartbeats included); ` +
          `CPU per create + kill: API ${cpu.api.toFixed(2)} ms, Postgres ${cpu.postgres.toFixed(2)} ms, ` +
          `bench client and simulated nodes ${cpu.bench.toFixed(2)} ms` +
          (errors.size ? `; errors ${JSON.stringify(Object.fromEntries(errors))}` : ""),
      );
      return rate;
    };
    // A short warm-up (JIT, pools, the template resolution caches) outside the figures.
    await row(3, 2, false);
    const rates: number[] = [];
    for (const k of [1, 2, 3]) rates.push(await row(k));
    console.log(
      `api: ${SIM_NODES} simulated nodes${PAD_NODES ? ` + ${PAD_NODES} full node rows` : ""}${LIVE ? ` holding ${LIVE} running sandboxes` : ""}; ` +
        `ratio 2/1 replicas ${(rates[1]! / rates[0]!).toFixed(2)}, 3/1 ${(rates[2]! / rates[0]!).toFixed(2)}; load average ${loadavg()[0]!.toFixed(1)}`,
    );
  } finally {
    await Promise.all(beats.map((b) => b.stop()));
    await Promise.all(replicas.map((r) => r.proc.stop()));
    await Promise.all(nodes.map((n) => n.close()));
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const p of parts) {
  if (p === "placement") await placement();
  else if (p === "dispatcher") await dispatcher();
  else if (p === "api") await api();
  else throw new Error(`unknown part ${JSON.stringify(p)}: placement, dispatcher or api`);
}
