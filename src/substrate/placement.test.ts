import { test } from "node:test";
import assert from "node:assert/strict";
import { decidePlacement, requirePlacement, RANKED_EXACTLY, type PlacementNode, type PlacementWork, type GateMode } from "./placement.ts";
import { parseSelector } from "../core/selector.ts";
import { computeCensus } from "../controller/census.ts";

const ENV_A = "sha256:aaaaaaaaaaaaaaaa";
const ENV_B = "sha256:bbbbbbbbbbbbbbbb";

function node(id: string, o: Partial<PlacementNode> = {}): PlacementNode {
  return {
    id,
    status: "ready",
    nodeGroup: "default",
    labels: {},
    capacity: { vcpu: 8, memoryMib: 16384, diskMib: 100_000, networkSlots: 10 },
    used: { vcpu: 0, memoryMib: 0, diskMib: 0, networkSlots: 0 },
    usableEnvironments: [ENV_A],
    templates: [],
    ...o,
  };
}
const work = (o: Partial<PlacementWork> = {}): PlacementWork => ({
  templateId: "base",
  vcpu: 2,
  memoryMib: 1024,
  diskMib: 2048,
  ...o,
});

const fleet = [
  node("a1", { nodeGroup: "a", labels: { zone: "z1", disk: "ssd" } }),
  node("a2", { nodeGroup: "a", labels: { zone: "z2" }, usableEnvironments: [ENV_B] }),
  node("b1", { nodeGroup: "b", labels: { zone: "z1" } }),
  node("d1", { status: "draining" }),
  node("f1", { status: "fenced" }),
  node("u1", { status: "unavailable" }),
];

const cases: Array<{
  name: string;
  nodes: PlacementNode[];
  work: PlacementWork;
  gate?: GateMode;
  want: string | RegExp;
  code?: string;
}> = [
  { name: "node group boundary: a", nodes: fleet, work: work({ nodeGroup: "b" }), want: "b1" },
  {
    name: "node group without nodes explains",
    nodes: fleet,
    work: work({ nodeGroup: "gpu" }),
    want: /3 nodes outside node group gpu, 1 node unavailable, 1 node draining, 1 node fenced/,
    code: "failed_precondition",
  },
  { name: "selector picks the labelled node", nodes: fleet, work: work({ nodeSelector: { zone: "z2" } }), want: "a2" },
  {
    name: "selector + group intersect",
    nodes: fleet,
    work: work({ nodeGroup: "a", nodeSelector: { zone: "z1", disk: "ssd" } }),
    want: "a1",
  },
  {
    name: "selector nobody matches",
    nodes: fleet,
    work: work({ nodeSelector: { gpu: "h100" } }),
    want: /3 nodes not matching node selector gpu=h100/,
    code: "failed_precondition",
  },
  {
    name: "drain/fence/unavailable never chosen",
    nodes: [fleet[3]!, fleet[4]!, fleet[5]!],
    work: work(),
    want: /unavailable.*draining.*fenced/,
    code: "unavailable",
  },
  { name: "no nodes at all", nodes: [], work: work(), want: /no node is registered/, code: "unavailable" },
  {
    name: "full node: slots",
    nodes: [node("x", { used: { vcpu: 0, memoryMib: 0, diskMib: 0, networkSlots: 10 } })],
    work: work(),
    want: /1 node full \(network slots\)/,
    code: "resource_exhausted",
  },
  {
    name: "full node: memory (2x overcommit)",
    nodes: [node("x", { capacity: { vcpu: 8, memoryMib: 1000, diskMib: 100_000, networkSlots: 10 } })],
    work: work({ memoryMib: 2048 }),
    want: /full \(memory\)/,
    code: "resource_exhausted",
  },
  {
    name: "gate on: bound work only on nodes publishing it",
    nodes: fleet,
    work: work({ environment: { kind: "bound", environment: ENV_B, source: "t" } }),
    gate: "on",
    want: "a2",
  },
  {
    name: "gate on: nobody publishes → explained",
    nodes: [node("x"), node("y")],
    work: work({ environment: { kind: "bound", environment: ENV_B, source: "t" } }),
    gate: "on",
    want: /2 nodes lack environment sha256:bbbb/,
    code: "failed_precondition",
  },
  {
    name: "gate on: unbound work never refused",
    nodes: [node("x", { usableEnvironments: [] })],
    work: work(),
    gate: "on",
    want: "x",
  },
  {
    name: "gate on: unreadable binding fails before placing",
    nodes: [node("x")],
    work: work({ environment: { kind: "unreadable", reason: "garbled" } }),
    gate: "on",
    want: /unreadable: garbled/,
    code: "failed_precondition",
  },
  {
    name: "gate off ignores environments",
    nodes: [node("x", { usableEnvironments: [] })],
    work: work({ environment: { kind: "bound", environment: ENV_B, source: "t" } }),
    gate: "off",
    want: "x",
  },
  {
    name: "gate shadow places as off",
    nodes: [node("x", { usableEnvironments: [] })],
    work: work({ environment: { kind: "bound", environment: ENV_B, source: "t" } }),
    gate: "shadow",
    want: "x",
  },
  {
    name: "gate shadow: unreadable placed as off",
    nodes: [node("x")],
    work: work({ environment: { kind: "unreadable", reason: "garbled" } }),
    gate: "shadow",
    want: "x",
  },
  {
    name: "template locality wins between equal nodes",
    nodes: [node("cold"), node("warm", { templates: ["base"] })],
    work: work(),
    want: "warm",
  },
  {
    name: "free capacity wins without locality",
    nodes: [node("busy", { used: { vcpu: 4, memoryMib: 8000, diskMib: 0, networkSlots: 5 } }), node("idle")],
    work: work(),
    want: "idle",
  },
  {
    name: "unknown capacity still usable",
    nodes: [node("new", { capacity: null, used: null })],
    work: work(),
    want: "new",
  },
];

for (const c of cases) {
  test(`placement: ${c.name}`, () => {
    const opts = { gate: c.gate ?? "off" };
    if (typeof c.want === "string") {
      assert.equal(requirePlacement(c.nodes, c.work, opts).nodeId, c.want);
    } else {
      assert.throws(
        () => requirePlacement(c.nodes, c.work, opts),
        (e: unknown) => {
          assert.match((e as Error).message, c.want as RegExp);
          if (c.code) assert.equal((e as { code: string }).code, c.code);
          return true;
        },
      );
    }
  });
}

test("placement: in-flight placements spread a burst", () => {
  const nodes = [node("n1"), node("n2"), node("n3")];
  const inflight = new Map<string, number>();
  const chosen: string[] = [];
  for (let i = 0; i < 9; i++) {
    const d = requirePlacement(nodes, work(), { gate: "off", inflight });
    inflight.set(d.nodeId, (inflight.get(d.nodeId) ?? 0) + 1);
    chosen.push(d.nodeId);
  }
  for (const n of ["n1", "n2", "n3"]) assert.equal(chosen.filter((c) => c === n).length, 3, chosen.join(","));
});

test("placement: near-equal nodes spread by sandboxes held, not by measurement noise", () => {
  // The ledger path: each placement shows up as one more slot (and 32 MiB) in `used`, while
  // the host memory the nodes measured differs by a few hundred MiB.
  const cap = { vcpu: 2, memoryMib: 24_000, diskMib: 100_000, networkSlots: 256 };
  const used = { a: 8_000, b: 8_300, c: 8_600 } as Record<string, number>;
  const held = new Map<string, number>();
  const chosen: string[] = [];
  for (let i = 0; i < 3; i++) {
    const nodes = Object.keys(used).map((id) => {
      const h = held.get(id) ?? 0;
      return node(id, { capacity: cap, used: { vcpu: 0, memoryMib: used[id]! + 32 * h, diskMib: 0, networkSlots: h } });
    });
    const d = requirePlacement(nodes, work(), { gate: "off" });
    held.set(d.nodeId, (held.get(d.nodeId) ?? 0) + 1);
    chosen.push(d.nodeId);
  }
  assert.deepEqual([...chosen].sort(), ["a", "b", "c"], chosen.join(","));
});

test("placement: in-flight counts against slots", () => {
  const nodes = [node("n1", { capacity: { vcpu: 8, memoryMib: 16384, diskMib: 100_000, networkSlots: 2 } })];
  const inflight = new Map([["n1", 2]]);
  assert.throws(() => requirePlacement(nodes, work(), { gate: "off", inflight }), /full \(network slots\)/);
});

test("placement: shadow records what on would do", () => {
  const bound = work({ environment: { kind: "bound", environment: ENV_B, source: "t" } });
  const d = decidePlacement([node("x")], bound, { gate: "shadow" });
  assert.equal(d.nodeId, "x");
  assert.equal(d.gatePlacement, "environment_not_usable");
  assert.match(d.shadowWouldFail ?? "", /no candidate node publishes environment sha256:bbbb/);
  const ok = decidePlacement([node("x"), node("y", { usableEnvironments: [ENV_B] })], bound, { gate: "shadow" });
  assert.equal(ok.shadowWouldFail, undefined);
  assert.equal(decidePlacement([node("x")], work(), { gate: "shadow" }).gatePlacement, "no_evidence");
  assert.equal(
    decidePlacement([node("x")], work({ environment: { kind: "bound", environment: ENV_A, source: "t" } }), { gate: "on" })
      .gatePlacement,
    "admitted",
  );
  assert.equal(decidePlacement([node("x")], work(), { gate: "off" }).gatePlacement, undefined);
});

test("placement: rejected ids are reported per reason", () => {
  const d = decidePlacement(fleet, work({ nodeGroup: "a", nodeSelector: { zone: "z1" } }), { gate: "off" });
  assert.equal(d.nodeId, "a1");
  assert.deepEqual(d.rejected, {
    other_node_group: ["b1"],
    selector_mismatch: ["a2"],
    draining: ["d1"],
    fenced: ["f1"],
    unavailable: ["u1"],
  });
});

test("parseSelector", () => {
  assert.deepEqual(parseSelector(""), {});
  assert.deepEqual(parseSelector("a=b, space.dev/x=1"), { a: "b", "space.dev/x": "1" });
  assert.throws(() => parseSelector("novalue"), /key=value/);
});

test("census: running and pending classes", () => {
  const nodes = [
    { id: "n1", status: "ready", usableEnvironments: [ENV_A] },
    { id: "n2", status: "ready", usableEnvironments: [] },
  ];
  const bound = (e: string) => ({ kind: "bound" as const, environment: e, source: "t" });
  const c = computeCensus(
    [
      { state: "running", nodeId: "n1", binding: bound(ENV_A) },
      { state: "running", nodeId: "n2", binding: bound(ENV_A) },
      { state: "running", nodeId: "n2", binding: { kind: "none" } },
      { state: "creating", nodeId: null, binding: bound(ENV_B) },
      { state: "creating", nodeId: null, binding: bound(ENV_A) },
      { state: "creating", nodeId: null, binding: { kind: "unreadable", reason: "x" } },
    ],
    nodes,
  );
  assert.deepEqual(c, {
    running: { admitted: 1, no_evidence: 1, environment_not_usable: 1 },
    pending: { no_evidence: 1, environment_not_usable: 1 },
  });
});

test("a large fleet: the best RANKED_EXACTLY candidates lead in exact order, every candidate follows once, the near-equal spread stays among them", () => {
  // 1,000 nodes with distinct loads (scores fall with memory used), shuffled, plus two full ones.
  const n = 1000;
  const order = Array.from({ length: n }, (_, i) => (i * 389) % n);
  const nodes = order.map((i) =>
    node(`n${String(i).padStart(4, "0")}`, {
      capacity: { vcpu: 64, memoryMib: 1_000_000, diskMib: 1_000_000, networkSlots: 1000 },
      used: { vcpu: 0, memoryMib: i * 997, diskMib: 0, networkSlots: 500 },
    }),
  );
  nodes.push(node("full1", { used: { vcpu: 8, memoryMib: 16384, diskMib: 0, networkSlots: 10 } }), node("full2", { used: { vcpu: 8, memoryMib: 16384, diskMib: 0, networkSlots: 10 } }));
  const d = decidePlacement(nodes, work(), { gate: "off" });
  assert.equal(d.ranked.length, n, "every candidate, once; the full nodes rejected");
  assert.equal(new Set(d.ranked.map((r) => r.nodeId)).size, n);
  const exact = [...d.ranked].sort((a, b) => b.score - a.score || (a.nodeId < b.nodeId ? -1 : 1));
  const head = d.ranked.slice(0, RANKED_EXACTLY);
  // Equal load everywhere, so the near-equal spread keeps score order: the head is the exact best.
  assert.deepEqual(head.map((r) => r.nodeId), exact.slice(0, RANKED_EXACTLY).map((r) => r.nodeId));
  assert.equal(d.nodeId, "n0000", "the least used node");
  assert.ok(d.ranked.slice(RANKED_EXACTLY).every((r) => r.score < head.at(-1)!.score), "the rest all score below the head");
});

test("a large fleet of equal nodes: ties go by listing order (directories list by node id), every candidate ranked once", () => {
  const nodes = Array.from({ length: 1000 }, (_, i) => node(`n${String(i).padStart(4, "0")}`));
  const d = decidePlacement(nodes, work(), { gate: "off" });
  assert.equal(d.nodeId, "n0000");
  assert.deepEqual(d.ranked.slice(0, 3).map((r) => r.nodeId), ["n0000", "n0001", "n0002"]);
  assert.equal(new Set(d.ranked.map((r) => r.nodeId)).size, 1000);
});
