/**
 * Native API benchmark (issue 6): for 100 sequential creates, the medians of
 * queued → claimed (dispatcher pickup) and queued → succeeded, read from the operations'
 * own timestamps (database clock); then 20 concurrent creates end to end (first POST to
 * the last operation succeeded, as a client sees it over HTTP with ?wait long-polls).
 *
 *   node --import tsx bench/native.ts                 # in-process stack: real API over HTTP,
 *                                                    # real dispatcher + store, FakeSubstrate
 *   SPACE_BENCH_ENGINE=postgres SPACE_TEST_DATABASE_URL=postgres://… node --import tsx bench/native.ts
 *   SPACE_BENCH_API_URL=http://127.0.0.1:3000 SPACE_BENCH_TOKEN=<key or token> node --import tsx bench/native.ts
 *                                                    # against a running `space up` (real sandboxes)
 *
 * Reference (issue 6): claim 14 ms, succeeded 1161 ms, 20 concurrent 4.09 s.
 * Target: claim < 2 ms, succeeded < 150 ms, 20 concurrent < 1 s.
 */
import type { AddressInfo } from "node:net";
import { startHarness, type Harness } from "../test/native/harness.ts";

const N = Number(process.env.SPACE_BENCH_CREATES ?? 100);
const C = Number(process.env.SPACE_BENCH_CONCURRENT ?? 20);

interface Op {
  id: string;
  state: string;
  queued_at: string;
  claimed_at: string | null;
  succeeded_at: string | null;
  failure: unknown;
  result: { id: string } | null;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;

async function main() {
  let base = process.env.SPACE_BENCH_API_URL ?? "";
  let token = process.env.SPACE_BENCH_TOKEN ?? "";
  let h: Harness | undefined;
  let mode = "remote stack";
  if (!base) {
    const engine = (process.env.SPACE_BENCH_ENGINE ?? "pglite") as "pglite" | "postgres";
    h = await startHarness(engine);
    await h.app.listen({ port: 0, host: "127.0.0.1" });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    token = h.tokens.a;
    mode = `in-process (${engine}, FakeSubstrate: measures the control plane, not the node)`;
  }
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
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
  const cleanup: string[] = [];

  // Warm up (JIT, pools, template cache on a real node).
  for (let i = 0; i < 3; i++) cleanup.push((await wait((await create()).id)).result?.id ?? "");

  const claim: number[] = [];
  const done: number[] = [];
  let failed = 0;
  for (let i = 0; i < N; i++) {
    const op = await wait((await create()).id);
    if (op.state !== "succeeded") {
      failed++;
      continue;
    }
    // Delete as we go so a real node never holds more than a few bench sandboxes.
    void fetch(`${base}/v1/sandboxes/${op.result!.id}`, { method: "DELETE", headers }).catch(() => {});
    const q = Date.parse(op.queued_at);
    claim.push(Date.parse(op.claimed_at!) - q);
    done.push(Date.parse(op.succeeded_at!) - q);
  }

  const t0 = performance.now();
  const ops = await Promise.all(Array.from({ length: C }, async () => wait((await create()).id)));
  const concurrentMs = performance.now() - t0;
  for (const op of ops) if (op.result) cleanup.push(op.result.id);
  const concurrentFailed = ops.filter((o) => o.state !== "succeeded").length;

  const out = {
    mode,
    creates: N,
    failed,
    queued_to_claimed_ms: { median: median(claim), p90: pct(claim, 0.9), max: Math.max(...claim) },
    queued_to_succeeded_ms: { median: median(done), p90: pct(done, 0.9), max: Math.max(...done) },
    concurrent: { creates: C, failed: concurrentFailed, end_to_end_ms: Math.round(concurrentMs) },
    reference: { claim_ms: 14, succeeded_ms: 1161, concurrent_20_s: 4.09 },
    target: { claim_ms: 2, succeeded_ms: 150, concurrent_20_s: 1 },
  };
  console.log(JSON.stringify(out, null, 2));

  for (const id of cleanup.filter(Boolean)) await fetch(`${base}/v1/sandboxes/${id}`, { method: "DELETE", headers }).catch(() => {});
  await h?.close();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
