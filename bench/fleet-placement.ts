/**
 * Placement decision time for a large Direct fleet (simulated node rows):
 * - pure: `decidePlacement` over 1,000 in-memory nodes (filters + scoring only);
 * - store: DirectSubstrate.decide over 1,000 `nodes` rows (directory read + decision),
 *   on PGlite or Postgres (SPACE_BENCH_ENGINE), gate off and on.
 * Prints medians and p99 in ms.
 *
 *   node --import tsx bench/fleet-placement.ts
 */
import { randomUUID } from "node:crypto";
import { freshDb } from "../test/support/db.ts";
import { decidePlacement, type PlacementNode } from "../src/substrate/placement.ts";
import { DirectSubstrate } from "../src/substrate/direct/direct-substrate.ts";
import { StoreNodeDirectory } from "../src/sandboxes/queries.ts";
import { registerNode } from "../src/store/nodes.ts";
import type { NodeId } from "../src/core/ids.ts";
import { median, percentile } from "./support/stats.ts";

const N = Number(process.env.SPACE_BENCH_NODES ?? 1000);
const ENVS = ["sha256:aaaaaaaaaaaaaaaa", "sha256:bbbbbbbbbbbbbbbb"];
const engine = (process.env.SPACE_BENCH_ENGINE ?? "pglite") as "pglite" | "postgres";

function simNode(i: number): PlacementNode & { url: string } {
  return {
    id: randomUUID(),
    name: `sim-${i}`,
    url: `http://10.0.${i >> 8}.${i & 255}:3002`,
    status: i % 50 === 0 ? "draining" : "ready",
    nodeGroup: `g${i % 4}`,
    labels: { zone: `z${i % 3}`, tier: i % 10 === 0 ? "gpu" : "cpu" },
    capacity: { vcpu: 64, memoryMib: 262_144, diskMib: 2_000_000, networkSlots: 300 },
    used: { vcpu: (i * 7) % 64, memoryMib: (i * 997) % 200_000, diskMib: 0, networkSlots: (i * 13) % 300 },
    usableEnvironments: [ENVS[i % 2]!],
    templates: i % 5 === 0 ? ["base"] : [],
  };
}

const stats = (xs: number[]) => {
  return `median ${median(xs).toFixed(3)} ms, p99 ${percentile(xs, 99).toFixed(3)} ms (n=${xs.length})`;
};

const nodes = Array.from({ length: N }, (_, i) => simNode(i));
const work = {
  templateId: "base",
  vcpu: 2,
  memoryMib: 1024,
  diskMib: 2048,
  nodeGroup: "g1",
  nodeSelector: { tier: "cpu" },
  environment: { kind: "bound" as const, environment: ENVS[1]!, source: "bench" },
};
for (const gate of ["off", "on"] as const) {
  const t: number[] = [];
  for (let i = 0; i < 500; i++) {
    const t0 = performance.now();
    decidePlacement(nodes, work, { gate });
    t.push(performance.now() - t0);
  }
  console.log(`pure decision, ${N} nodes, gate=${gate}: ${stats(t)}`);
}

const db = await freshDb(engine);
for (const n of nodes) {
  await registerNode(db.db, {
    id: n.id as NodeId,
    name: n.name!,
    address: n.url,
    nodeGroup: n.nodeGroup,
    labels: n.labels,
    capacity: { ...n.capacity! },
    used: { ...n.used! },
    usableEnvironments: [...n.usableEnvironments],
    templates: n.templates.map((t) => ({ templateId: t, rootfsSizeMib: 451, environment: n.usableEnvironments[0] })),
  });
}
for (const gate of ["off", "on"] as const) {
  const sub = new DirectSubstrate({ nodes: new StoreNodeDirectory(db.db), internalToken: "x", gate });
  const t: number[] = [];
  for (let i = 0; i < 100; i++) {
    const t0 = performance.now();
    await sub.decide({ sandboxId: "s", ...work }, AbortSignal.timeout(10_000));
    t.push(performance.now() - t0);
  }
  console.log(`store decision (${engine}), ${N} node rows, gate=${gate}: ${stats(t)}`);
}
await db.drop();
