// Capacity reserved in the store at placement (docs/capacity.md), on both engines: a burst
// of concurrent placements — from two API replicas on Postgres — never overfills a node,
// and a sandbox that ends frees its room for the next placement at once, with no heartbeat.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { SpaceError } from "../../src/core/errors.ts";
import { newSandboxId, type NodeId, type SandboxId, type TenantId } from "../../src/core/ids.ts";
import type { Db } from "../../src/store/db.ts";
import { ensureTenant } from "../../src/store/tenants.ts";
import { insertSandbox, transitionSandbox } from "../../src/store/sandboxes.ts";
import { heartbeatNode, listNodes, registerNode, setNodeStatus } from "../../src/store/nodes.ts";
import { heldByNode } from "../../src/store/capacity-ledger.ts";
import { StoreNodeDirectory } from "../../src/sandboxes/queries.ts";
import { DirectSubstrate } from "../../src/substrate/direct/direct-substrate.ts";
import { DEFAULT_CAPACITY, memoryStanding, storeCapacityLedger, type CapacitySettings } from "../../src/substrate/capacity.ts";
import { freshDb, testEngines, type TestDb } from "../support/db.ts";

const shape = { vcpu: 2, memoryMib: 1024, diskMib: 2048 };
const work = (sandboxId: string) => ({ sandboxId, templateId: "base", ...shape });
const substrateOn = (db: Db, capacity: Partial<CapacitySettings> = {}) =>
  new DirectSubstrate({ nodes: new StoreNodeDirectory(db), internalToken: "t", ledger: storeCapacityLedger(db), capacity });
const isFull = (what: string) => (e: unknown) =>
  e instanceof SpaceError && e.code === "resource_exhausted" && e.message.includes(`full (${what})`);

for (const engine of testEngines()) {
  describe(`capacity ledger in the store: ${engine.name}`, { skip: engine.skip, timeout: 120_000 }, () => {
    let t: TestDb;
    let other: Db;
    let tenant: TenantId;
    before(async () => {
      t = await freshDb(engine.name);
      other = engine.name === "postgres" ? await t.openAnother() : t.db;
      tenant = (await ensureTenant(t.db, { name: "capacity" })).id;
    });
    after(() => t?.drop());

    const node = async (capacity: Record<string, number>, used: Record<string, number> = {}) => {
      // Each case has one ready node: the earlier cases' nodes are drained.
      for (const n of await listNodes(t.db, { status: ["ready"] })) await setNodeStatus(t.db, n.id, "draining");
      const id = randomUUID() as NodeId;
      await registerNode(t.db, { id, name: `n-${id.slice(0, 8)}`, address: "127.0.0.1:1", capacity, used });
      return id;
    };
    const rows = (n: number) => Promise.all(Array.from({ length: n }, () => insertSandbox(t.db, { id: newSandboxId(), tenantId: tenant, ...shape }).then((r) => r.id)));
    const onNode = async (nodeId: string) => (await heldByNode(t.db)).get(nodeId)?.slots ?? 0;

    it("a burst of 24 concurrent placements from two replicas against 5 slots: exactly 5 placed, the rest refused naming slots", async () => {
      const nodeId = await node({ networkSlots: 5, vcpu: 64, memoryMib: 1_000_000, diskMib: 0 });
      const ids = await rows(24);
      const a = substrateOn(t.db);
      const b = substrateOn(other);
      const results = await Promise.allSettled(ids.map((id, i) => (i % 2 ? a : b).place(work(id), AbortSignal.timeout(60_000))));
      const placed = results.filter((r) => r.status === "fulfilled");
      assert.equal(placed.length, 5, JSON.stringify(results.map((r) => r.status)));
      for (const r of results) if (r.status === "rejected") assert.ok(isFull("network slots")(r.reason), String(r.reason));
      assert.equal(await onNode(nodeId), 5, "the store holds exactly the cap: overfill 0");
    });

    it("concurrent placements of one replica on equal idle nodes spread, one per node", async () => {
      const first = await node({ networkSlots: 10, vcpu: 2, memoryMib: 1_000_000, diskMib: 0 });
      const others = await Promise.all([1, 2].map(async () => {
        const id = randomUUID() as NodeId;
        await registerNode(t.db, { id, name: `n-${id.slice(0, 8)}`, address: "127.0.0.1:1", capacity: { networkSlots: 10, vcpu: 2, memoryMib: 1_000_000, diskMib: 0 }, used: {} });
        return id;
      }));
      const s = substrateOn(t.db);
      const ids = await rows(3);
      const homes = await Promise.all(ids.map((id) => s.place(work(id), AbortSignal.timeout(10_000)).then((r) => r.nodeId)));
      assert.deepEqual(new Set(homes), new Set([first, ...others]), `one per node: ${homes.join(", ")}`);
    });

    it("a kill frees the room at once: the next placement is admitted with no heartbeat in between", async () => {
      const nodeId = await node({ networkSlots: 2, vcpu: 64, memoryMib: 1_000_000, diskMib: 0 });
      const [x, y, z] = await rows(3) as [SandboxId, SandboxId, SandboxId];
      const s = substrateOn(t.db);
      await s.place(work(x), AbortSignal.timeout(10_000));
      await s.place(work(y), AbortSignal.timeout(10_000));
      await assert.rejects(s.place(work(z), AbortSignal.timeout(10_000)), isFull("network slots"));
      // Being killed, it still holds its slot (the node is tearing it down); killed, it frees it.
      await transitionSandbox(t.db, x, "creating", "killing");
      await assert.rejects(s.place(work(z), AbortSignal.timeout(10_000)), isFull("network slots"));
      await transitionSandbox(t.db, x, "killing", "killed");
      assert.deepEqual(await s.place(work(z), AbortSignal.timeout(10_000)), { sandboxId: z, nodeId, recorded: true });
      const row = await t.db.one<{ node_id: string }>(`SELECT node_id::text FROM sandboxes WHERE id = $1`, [z]);
      assert.equal(row.node_id, nodeId, "recorded: the reservation bound the row to the node");
    });

    it("suspend frees memory and the slot; stopped keeps only its disk; paused keeps memory but not CPU", async () => {
      const nodeId = await node({ networkSlots: 10, vcpu: 64, memoryMib: 1_000_000, diskMib: 0 });
      const [a, b, c] = await rows(3) as [SandboxId, SandboxId, SandboxId];
      const s = substrateOn(t.db);
      for (const id of [a, b, c]) {
        await s.place(work(id), AbortSignal.timeout(10_000));
        await transitionSandbox(t.db, id, "creating", "running");
      }
      await transitionSandbox(t.db, a, "running", "suspending");
      await transitionSandbox(t.db, a, "suspending", "suspended");
      await transitionSandbox(t.db, b, "running", "stopping");
      await transitionSandbox(t.db, b, "stopping", "stopped");
      await transitionSandbox(t.db, c, "running", "paused");
      assert.deepEqual((await heldByNode(t.db)).get(nodeId), { slots: 1, vcpu: 0, disk: 2 });
    });

    it("memory: what the node measured plus an estimate per sandbox placed since or still booting, up to the target; pressure refuses outright", async () => {
      // 10 000 MiB host, 85% target = 8 500; measured in use: 10 000 − 2 000 available = 8 000 with no sandbox resident.
      const nodeId = await node({ networkSlots: 100, vcpu: 64, memoryMib: 10_000, diskMib: 0 }, { settled: 0, memoryAvailableMib: 2_000, memoryPressure: 0 });
      const ids = await rows(20);
      const s = substrateOn(t.db);
      const results = await Promise.allSettled(ids.map((id) => s.place(work(id), AbortSignal.timeout(60_000))));
      // 32 MiB each: 8 000 + 15 × 32 = 8 480 ≤ 8 500; a 16th would be 8 512.
      assert.equal(results.filter((r) => r.status === "fulfilled").length, 15);
      for (const r of results) if (r.status === "rejected") assert.ok(isFull("memory")(r.reason), String(r.reason));
      // The heartbeat reconciles: the 15 measured at 10 MiB each leave room for more.
      await heartbeatNode(t.db, nodeId, { used: { settled: 15, memoryAvailableMib: 1_850, memoryPressure: 0 } });
      const [more] = await rows(1) as [SandboxId];
      assert.equal((await s.place(work(more), AbortSignal.timeout(10_000))).nodeId, nodeId);
      // One of the 16 still booting at the measurement is counted at its request on top of it:
      // 10 000 − 1 560 = 8 440 measured, + 32 for it, + 32 for one more = 8 504 > 8 500.
      await heartbeatNode(t.db, nodeId, { used: { settled: 15, memoryAvailableMib: 1_560, memoryPressure: 0 } });
      const [booting] = await rows(1) as [SandboxId];
      await assert.rejects(s.place(work(booting), AbortSignal.timeout(10_000)), isFull("memory"));
      // Settled at the same measurement, it leaves room: 8 440 + 32 = 8 472.
      await heartbeatNode(t.db, nodeId, { used: { settled: 16, memoryAvailableMib: 1_560, memoryPressure: 0 } });
      assert.equal((await s.place(work(booting), AbortSignal.timeout(10_000))).nodeId, nodeId);
      await heartbeatNode(t.db, nodeId, { used: { settled: 17, memoryAvailableMib: 5_000, memoryPressure: 35 } });
      const [late] = await rows(1) as [SandboxId];
      await assert.rejects(s.place(work(late), AbortSignal.timeout(10_000)), (e: unknown) => e instanceof SpaceError && e.code === "resource_exhausted" && e.message.includes("1 node under memory pressure"));
    });

    it("a node found past its memory target keeps its count: an ended sandbox's room is taken at once, never more, never past the limit; near the target still, clearly under it the count is forgotten", async () => {
      // 10 000 MiB host: target 85% = 8 500, limit 92% = 9 200.
      const capacity = { networkSlots: 100, vcpu: 64, memoryMib: 10_000, diskMib: 0 };
      const nodeId = await node(capacity, { settled: 0, memoryAvailableMib: 2_000, memoryPressure: 0 });
      const measure = (used: Record<string, number>) =>
        heartbeatNode(t.db, nodeId, { used, memoryStanding: memoryStanding({ capacity, used }, DEFAULT_CAPACITY)! });
      const fullSlots = async () => (await t.db.one<{ n: number | null }>(`SELECT memory_full_slots AS n FROM nodes WHERE id = $1`, [nodeId])).n;
      const s = substrateOn(t.db);
      const place = (id: string) => s.place(work(id), AbortSignal.timeout(10_000));
      const end = async (id: SandboxId) => {
        await transitionSandbox(t.db, id, "creating", "killing");
        await transitionSandbox(t.db, id, "killing", "killed");
      };
      const held = await rows(10) as SandboxId[];
      for (const id of held) await place(id);
      // Measured at 8 000 + 10 × 32, they grew after it: 8 800 in use, past the target.
      await measure({ settled: 10, memoryAvailableMib: 1_200, memoryPressure: 0 });
      assert.equal(await fullSlots(), 10, "the heartbeat that found it past the target recorded its count");
      const [a, b, c, d, e] = await rows(5) as [SandboxId, SandboxId, SandboxId, SandboxId, SandboxId];
      await assert.rejects(place(a), isFull("memory"));
      // Two end: two new ones take their room at once (8 800 − 2 × 32 + 32 is past the target), a third does not.
      await end(held[0]!);
      await end(held[1]!);
      assert.equal((await place(a)).nodeId, nodeId);
      assert.equal((await place(b)).nodeId, nodeId);
      await assert.rejects(place(c), isFull("memory"));
      // Measured again, still past and now under memory pressure: the count stays what it was
      // when first found so (10), not what it holds now, and pressure refuses growth, not
      // turnover: one more ending is room for one more, and nothing beyond.
      await end(held[2]!);
      await measure({ settled: 9, memoryAvailableMib: 1_250, memoryPressure: 30 });
      assert.equal(await fullSlots(), 10);
      assert.equal((await place(c)).nodeId, nodeId);
      await assert.rejects(place(d), (e: unknown) => e instanceof SpaceError && e.message.includes("1 node under memory pressure"));
      // Past the limit (9 300 in use), not even in place of one that ended.
      await end(held[3]!);
      await measure({ settled: 9, memoryAvailableMib: 700, memoryPressure: 0 });
      await assert.rejects(place(d), isFull("memory"));
      // Near the target (8 410 in use: under it by less than 1% of the host), the count stays:
      // one ended is room for one new, and the budget's room is no growth (e is refused though
      // 8 410 + 2 × 32 is under the target).
      await measure({ settled: 9, memoryAvailableMib: 1_590, memoryPressure: 0 });
      assert.equal(await fullSlots(), 10);
      assert.equal((await place(d)).nodeId, nodeId);
      await assert.rejects(place(e), isFull("memory"));
      // Clearly under the target, the count is forgotten; found past it again, it is what the node holds then (10).
      await measure({ settled: 10, memoryAvailableMib: 2_000, memoryPressure: 0 });
      assert.equal(await fullSlots(), null);
      await measure({ settled: 10, memoryAvailableMib: 1_200, memoryPressure: 0 });
      assert.equal(await fullSlots(), 10);
      await assert.rejects(place(e), isFull("memory"));
    });

    it("CPU is a small request per vCPU: idle sandboxes far beyond the host's CPUs, then refused naming vcpu", async () => {
      // 2 CPUs, 8 milli-CPUs per vCPU, 2 vCPUs each: 125 sandboxes (250 vCPUs on 2 CPUs).
      await node({ networkSlots: 10_000, vcpu: 2, memoryMib: 1_000_000, diskMib: 0 });
      const s = substrateOn(t.db, { cpuRequestMilli: 8 });
      const ids = await rows(126);
      for (const id of ids.slice(0, 125)) await s.place(work(id), AbortSignal.timeout(10_000));
      await assert.rejects(s.place(work(ids[125]!), AbortSignal.timeout(10_000)), isFull("vcpu"));
      // A sandbox asking more vCPUs than an idle node has is admitted there (cpu.max caps it at
      // the host); one asking more memory than the node has is refused, however idle it is.
      const idle = await node({ networkSlots: 10, vcpu: 2, memoryMib: 4_000, diskMib: 0 });
      const [big, huge] = await rows(2) as [SandboxId, SandboxId];
      assert.equal((await s.place({ ...work(big), vcpu: 8 }, AbortSignal.timeout(10_000))).nodeId, idle);
      await assert.rejects(s.place({ ...work(huge), memoryMib: 8_000 }, AbortSignal.timeout(10_000)), isFull("memory"));
    });
  });
}
