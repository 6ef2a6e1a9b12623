/**
 * Native API benchmark (issue 6). Per phase: N sequential creates → medians of queued →
 * claimed (dispatcher pickup) and queued → succeeded, from the operations' own timestamps
 * (database clock); then C concurrent creates end to end (first POST to the last
 * operation succeeded, as a client sees it over HTTP with ?wait long-polls).
 *
 * Phases, in one run on one stack: `cold` (no warm pool) and `warm` (a pool of `--pool`
 * members for `base`, waited full before each part; every sample says whether it adopted,
 * and the adopted-only medians are reported apart, so cold fallbacks never pass as warm).
 *
 *   npm run bench -- native [--creates 100] [--concurrent 20] [--pool 20] [--postgres] [--json]
 *       starts the real stack (`space up` in a temp data dir: runc sandboxes)
 *   npm run bench -- native --fake [--postgres]
 *       in-process: real API over HTTP, real dispatcher + store, FakeSubstrate
 *       (measures the control plane alone, no node; cold only)
 *   --postgres: the store is a fresh database on SPACE_TEST_DATABASE_URL's server (the
 *       scale-out configuration; real NOTIFY) instead of PGlite embedded in the API process
 *   SPACE_BENCH_API_URL=… SPACE_BENCH_TOKEN=<key or token> [SPACE_ADMIN_TOKEN=…] npm run bench -- native
 *       against a running stack (warm phase only with the admin token)
 *
 * Reference (issue 6): claim 14 ms, succeeded 1161 ms, 20 concurrent 4.09 s.
 * Target: claim < 2 ms, succeeded < 150 ms, 20 concurrent < 1 s.
 */
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { startHarness, type Harness } from "../test/native/harness.ts";
import { freshDb, type TestDb } from "../test/support/db.ts";
import { startStack, waitFor, type Stack } from "../test/support/stack.ts";
import { median, percentile } from "./support/stats.ts";

interface Op {
  id: string;
  state: string;
  target: string;
  queued_at: string;
  claimed_at: string | null;
  succeeded_at: string | null;
  failure: unknown;
  result: { id: string } | null;
}

const stats = (xs: number[]) => ({ n: xs.length, median: Math.round(median(xs) * 10) / 10, p90: percentile(xs, 90), p99: percentile(xs, 99), max: xs.length ? Math.max(...xs) : NaN });

async function main() {
  const { values } = parseArgs({
    options: {
      creates: { type: "string", default: process.env.SPACE_BENCH_CREATES ?? "100" },
      concurrent: { type: "string", default: process.env.SPACE_BENCH_CONCURRENT ?? "20" },
      pool: { type: "string", default: "20" },
      fake: { type: "boolean", default: false },
      postgres: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
    },
  });
  const N = Number(values.creates);
  const C = Number(values.concurrent);
  const poolSize = Number(values.pool);
  let base = process.env.SPACE_BENCH_API_URL ?? "";
  let token = process.env.SPACE_BENCH_TOKEN ?? "";
  let adminToken = process.env.SPACE_ADMIN_TOKEN ?? "";
  let h: Harness | undefined;
  let stack: Stack | undefined;
  let mode = "remote stack";
  let pg: TestDb | undefined;
  if (values.fake) {
    const engine = values.postgres ? "postgres" : ((process.env.SPACE_BENCH_ENGINE ?? "pglite") as "pglite" | "postgres");
    h = await startHarness(engine);
    await h.app.listen({ port: 0, host: "127.0.0.1" });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    token = h.tokens.a;
    adminToken = "";
    mode = `in-process (${engine}, FakeSubstrate: the control plane alone, not the node)`;
  } else if (!base) {
    // 1 vCPU sandboxes and room for C concurrent creates beside a full pool on a small node.
    if (values.postgres) pg = await freshDb("postgres", { migrate: false });
    stack = await startStack({
      env: {
        SPACE_DEFAULT_VCPU: process.env.BENCH_VCPU ?? "1",
        SPACE_PLACEMENT_VCPU_OVERCOMMIT: process.env.BENCH_VCPU_OVERCOMMIT ?? "32",
        ...(pg ? { SPACE_DATABASE_URL: pg.url } : {}),
      },
    });
    ({ apiUrl: base, apiKey: token, adminToken } = stack);
    mode = `real stack (space up, runc sandboxes, store: ${pg ? "postgres" : "pglite"})`;
  }
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, ...(body ? { "content-type": "application/json" } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    if (!r.ok && r.status !== 404) throw new Error(`admin ${method} ${path}: ${r.status} ${await r.text()}`);
    return r.status === 204 || r.status === 404 ? null : ((await r.json()) as { members?: Array<{ state: string }> });
  };
  const ready = async () => ((await admin("GET", "/warm-pools/base"))?.members ?? []).filter((m) => m.state === "ready").length;
  const adoptions = async () =>
    (await (await fetch(`${base}/metrics`)).text())
      .split("\n")
      .filter((l) => l.startsWith("space_warm_pool_adoptions_total{"))
      .reduce((a, l) => a + Number(l.split(" ").pop()), 0);
  const create = async (): Promise<Op> => {
    const r = await fetch(`${base}/v1/sandboxes`, { method: "POST", headers, body: JSON.stringify({ template: process.env.SPACE_BENCH_TEMPLATE ?? "base", timeout_s: 300 }) });
    if (r.status !== 202) throw new Error(`create: ${r.status} ${await r.text()}`);
    return (await r.json()) as Op;
  };
  const wait = async (id: string): Promise<Op> => {
    for (;;) {
      const r = await fetch(`${base}/v1/operations/${id}?wait=30s`, { headers });
      const op = (await r.json()) as Op;
      if (op.state === "succeeded" || op.state === "failed") return op;
    }
  };
  const del = (id: string) => fetch(`${base}/v1/sandboxes/${id}`, { method: "DELETE", headers }).then((r) => r.text()).catch(() => "");
  const warmCapable = !values.fake && adminToken !== "";

  const sequential = async (track: boolean) => {
    const claim: number[] = [];
    const done: number[] = [];
    const adoptedDone: number[] = [];
    let failed = 0;
    let adopted = 0;
    for (let i = 0; i < N; i++) {
      const a0 = track ? await adoptions() : 0;
      const op = await wait((await create()).id);
      if (op.state !== "succeeded") {
        failed++;
        process.stderr.write(`create ${i} failed: ${JSON.stringify(op.failure)}\n`);
        continue;
      }
      const wasAdopted = track && (await adoptions()) > a0;
      // Delete as we go so a real node never holds more than a few bench sandboxes.
      void del(op.result!.id);
      const q = Date.parse(op.queued_at);
      claim.push(Date.parse(op.claimed_at!) - q);
      done.push(Date.parse(op.succeeded_at!) - q);
      if (wasAdopted) {
        adopted++;
        adoptedDone.push(Date.parse(op.succeeded_at!) - q);
      }
    }
    return { claim, done, adoptedDone, failed, adopted };
  };
  const concurrent = async () => {
    const t0 = performance.now();
    const ops = await Promise.all(Array.from({ length: C }, async () => wait((await create()).id)));
    const ms = performance.now() - t0;
    await Promise.all(ops.flatMap((o) => (o.result ? [del(o.result.id)] : [])));
    return { ms: Math.round(ms), failed: ops.filter((o) => o.state !== "succeeded").length };
  };

  const results: Record<string, unknown> = {};
  try {
    if (warmCapable) await admin("DELETE", "/warm-pools/base");
    // Warm up (JIT, template cache on a real node); not counted.
    for (let i = 0; i < 3; i++) {
      const op = await wait((await create()).id);
      if (op.result) await del(op.result.id);
    }
    const cs = await sequential(false);
    const cc = await concurrent();
    results.cold = {
      sequential: { creates: N, failed: cs.failed, queued_to_claimed_ms: stats(cs.claim), queued_to_succeeded_ms: stats(cs.done) },
      concurrent: { creates: C, failed: cc.failed, end_to_end_ms: cc.ms },
    };
    if (warmCapable) {
      const size = Math.max(poolSize, C);
      await admin("PUT", "/warm-pools/base", { size });
      const full = (k: number) => waitFor(async () => (await ready()) >= k, `warm pool holds ${k} ready members`, 15 * 60_000, 500);
      await full(size);
      const ws = await sequential(true);
      await full(C);
      const a1 = await adoptions();
      const wc = await concurrent();
      const concurrentAdopted = (await adoptions()) - a1;
      results.warm = {
        pool: size,
        sequential: {
          creates: N,
          failed: ws.failed,
          adopted: ws.adopted,
          queued_to_claimed_ms: stats(ws.claim),
          queued_to_succeeded_ms: stats(ws.done),
          adopted_only_queued_to_succeeded_ms: stats(ws.adoptedDone),
        },
        concurrent: { creates: C, failed: wc.failed, adopted: concurrentAdopted, end_to_end_ms: wc.ms },
      };
      await admin("DELETE", "/warm-pools/base");
    }
  } finally {
    await h?.close();
    await stack?.stop();
    await pg?.drop();
  }
  const out = {
    bench: "native",
    mode,
    ...results,
    reference: { claim_ms: 14, succeeded_ms: 1161, concurrent_20_s: 4.09 },
    target: { claim_ms: 2, succeeded_ms: 150, concurrent_20_s: 1 },
  };
  if (values.json) {
    process.stdout.write(JSON.stringify(out, null, 2) + "\n");
    return;
  }
  const line = (name: string, p: { sequential: Record<string, unknown>; concurrent: Record<string, unknown> }) => {
    const s = p.sequential as { queued_to_claimed_ms: ReturnType<typeof stats>; queued_to_succeeded_ms: ReturnType<typeof stats>; failed: number; adopted?: number; adopted_only_queued_to_succeeded_ms?: ReturnType<typeof stats> };
    const c = p.concurrent as { end_to_end_ms: number; failed: number; adopted?: number };
    process.stdout.write(
      `  ${name.padEnd(5)} ${N} sequential: queued→claimed median ${s.queued_to_claimed_ms.median} ms (p99 ${s.queued_to_claimed_ms.p99}), ` +
        `queued→succeeded median ${s.queued_to_succeeded_ms.median} ms (p99 ${s.queued_to_succeeded_ms.p99}), failed ${s.failed}` +
        (s.adopted !== undefined ? `, adopted ${s.adopted}/${N} (adopted only: median ${s.adopted_only_queued_to_succeeded_ms!.median} ms)` : "") +
        `\n  ${"".padEnd(5)} ${C} concurrent: end to end ${c.end_to_end_ms} ms, failed ${c.failed}` +
        (c.adopted !== undefined ? `, adopted ${c.adopted}/${C}` : "") +
        "\n",
    );
  };
  process.stdout.write(`Native creates (${mode})\n`);
  line("cold", results.cold as never);
  if (results.warm) line("warm", results.warm as never);
  process.stdout.write(`  reference: claim 14 ms, succeeded 1161 ms, 20 concurrent 4.09 s; target: < 2 ms, < 150 ms, < 1 s\n`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
