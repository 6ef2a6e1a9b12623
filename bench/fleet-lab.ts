/**
 * Concurrent creates spread over a 3-node Direct lab (test/fleet/lab.ts: three `space node`
 * agents, each in its own network namespace, one `space api`, Postgres): N ECW creates
 * (default 100) sent at once, each timed from request to 201 (envd ready). Reports how
 * placement spread them over the nodes, the create latency per node, and the same create
 * latency sequentially (the baseline, same lab, same run).
 *
 *   npm run bench -- fleet-lab [concurrent=100] [sequential=5]
 *
 * Needs root, Postgres (SPACE_TEST_DATABASE_URL) and dist/envd. The lab overcommits vCPU
 * (SPACE_PLACEMENT_VCPU_OVERCOMMIT=64) so 100 two-vCPU sandboxes fit three 2-core nodes;
 * memory, slots and disk use the defaults' arithmetic with room for all of them.
 */
import { freshDb } from "../test/support/db.ts";
import { startLab } from "../test/fleet/lab.ts";
import { median, percentile } from "./support/stats.ts";

const CONCURRENT = Number(process.argv[2] ?? 100);
const SEQUENTIAL = Number(process.argv[3] ?? 5);

const stats = (xs: number[]) => {
  if (!xs.length) return "n=0";
  return `median ${median(xs).toFixed(0)} ms, p99 ${percentile(xs, 99).toFixed(0)} ms (n=${xs.length})`;
};

const db = await freshDb("postgres");
const lab = await startLab({
  databaseUrl: db.url,
  nodes: ["a", "b", "c"].map((key) => ({ key, group: "default", labels: { fleet: key } })),
  apis: [{ name: "api", env: { SPACE_PLACEMENT_VCPU_OVERCOMMIT: "64" } }],
  controllers: 1,
  maxSlots: Math.max(50, Math.ceil(CONCURRENT / 2)),
  nodeEnv: { SPACE_NODE_BTRFS_IMAGE_GIB: "24" },
});
try {
  const tenant = await lab.admin("POST", "/tenants", { name: `bench-${lab.run}` });
  const apiKey = (await lab.admin("POST", `/tenants/${tenant.body.id}/keys`, {})).body.key as string;
  const nodes = (await lab.admin("GET", "/nodes")).body.nodes as Array<{ id: string; name: string }>;
  const nameOf = new Map(nodes.map((n) => [n.id, n.name]));
  const api = lab.apis[0]!.url;

  const create = async (): Promise<{ ms: number; id?: string; error?: string }> => {
    const t0 = performance.now();
    const r = await fetch(`${api}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", timeout: 900 }),
    });
    const body = (await r.json()) as { sandboxID?: string; message?: string };
    const ms = performance.now() - t0;
    return r.status === 201 ? { ms, id: body.sandboxID! } : { ms, error: `${r.status} ${body.message ?? ""}` };
  };
  const nodeOf = async (id: string) =>
    (await db.db.one<{ nodeId: string }>(`SELECT node_id AS "nodeId" FROM sandboxes WHERE id = $1`, [id])).nodeId;
  const kill = (id: string) => fetch(`${api}/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": apiKey } });

  // Baseline: one create at a time on the idle lab (killed before the next).
  const seq: number[] = [];
  for (let i = 0; i < SEQUENTIAL; i++) {
    const r = await create();
    if (!r.id) throw new Error(`sequential create failed: ${r.error}`);
    seq.push(r.ms);
    await kill(r.id);
  }
  await new Promise((r) => setTimeout(r, 2_000)); // heartbeats publish the freed capacity

  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: CONCURRENT }, () => create()));
  const wallMs = performance.now() - t0;
  const ok = results.filter((r) => r.id);
  const failed = results.filter((r) => !r.id);
  const perNode = new Map<string, number[]>();
  for (const r of ok) {
    const n = nameOf.get(await nodeOf(r.id!)) ?? "?";
    perNode.set(n, [...(perNode.get(n) ?? []), r.ms]);
  }

  console.log(`lab: 3 nodes (own network namespace each), 1 api, Postgres; load average ${(await import("node:os")).loadavg()[0]!.toFixed(1)}`);
  console.log(`baseline, ${SEQUENTIAL} sequential creates: ${stats(seq)}`);
  console.log(`${CONCURRENT} concurrent creates: ${ok.length} ok, ${failed.length} failed, wall ${(wallMs / 1000).toFixed(1)} s (${((ok.length / wallMs) * 1000).toFixed(1)} creates/s)`);
  console.log(`  create latency: ${stats(ok.map((r) => r.ms))}; median vs sequential baseline ${(median(ok.map((r) => r.ms)) / median(seq)).toFixed(1)}x`);
  for (const [name, ms] of [...perNode.entries()].sort()) console.log(`  ${name}: ${ms.length} sandboxes, ${stats(ms)}`);
  const counts = [...perNode.values()].map((v) => v.length);
  console.log(`  spread: max/min per node ${Math.max(...counts)}/${Math.min(...counts)}`);
  for (const f of failed.slice(0, 5)) console.log(`  failure: ${f.error}`);
} finally {
  await lab.stop();
  await db.drop();
}
