/**
 * Warm pools against the real store (PGlite; Postgres too with SPACE_TEST_DATABASE_URL)
 * and a fake substrate: refill, adoption with personalisation, atomic adoption under
 * parallel creates, cold fallback, release change drains, the environment gate
 * (warm_pool_environment at the store level), config parsing and the pure planner.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { freshDb, testEngines } from "../support/db.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { deleteNode, heartbeatNode, registerNode, setNodeStatus } from "../../src/store/nodes.ts";
import { createBuild, createTemplate, setRelease, updateBuild } from "../../src/store/templates.ts";
import { FakeSubstrate } from "../../src/substrate/fake-substrate.ts";
import type { PlacementRequest, SandboxRef, SandboxSpec, SandboxStatus, SnapshotDescriptor } from "../../src/substrate/substrate.ts";
import { createSandboxLayer } from "../../src/sandboxes/index.ts";
import { StoreNodeDirectory, StoreTemplates } from "../../src/sandboxes/queries.ts";
import type { CreateInput } from "../../src/sandboxes/service.ts";
import type { NodeId } from "../../src/core/ids.ts";
import type { GateMode } from "../../src/substrate/placement.ts";
import type { SandboxInit } from "../../src/contract/node-api.ts";
import { Registry } from "prom-client";
import { WarmPoolAdoption, checkMember, type MemberPersonaliser } from "../../src/controller/warm-pools/adoption.ts";
import { createWarmPoolReconciler } from "../../src/controller/warm-pools/reconciler.ts";
import { warmPoolMetrics } from "../../src/controller/warm-pools/metrics.ts";
import { parseWarmPoolsConfig } from "../../src/controller/warm-pools/config.ts";
import { planPool, type PlanInput } from "../../src/controller/warm-pools/plan.ts";
import { idleMoves, type IdleMember } from "../../src/controller/warm-pools/idle-policy.ts";
import { getWarmPool, listSlots, moveSlot, upsertWarmPool, type WarmSlot } from "../../src/store/warm-pools.ts";
import { SpaceError } from "../../src/core/errors.ts";

const log = pino({ level: "silent" });
const N1 = "00000000-0000-4000-8000-000000000001" as NodeId;
const N2 = "00000000-0000-4000-8000-000000000002" as NodeId;
const ENV = "sha256-0123456789abcdef0123";
const SHAPE = { vcpu: 1, memoryMib: 256, diskMib: 1024 };

const input = (o: Partial<CreateInput> = {}): CreateInput => ({
  template: "base", metadata: {}, envVars: {}, timeoutSec: 300, secure: true, allowInternetAccess: true,
  network: null, onTimeout: "kill", autoResume: false, resources: {}, ...o,
});

/** Places on the given nodes in turn, a pinned restore on its node (the real placement is tested elsewhere). */
class RoundRobinSubstrate extends FakeSubstrate {
  nodes: string[] = [N1];
  failNextRestore = false;
  #i = 0;
  override async place(req: PlacementRequest): Promise<SandboxRef> {
    if (req.pinnedNodeId) {
      this.calls.push(`place ${req.sandboxId} pinned ${req.pinnedNodeId}`);
      return { sandboxId: req.sandboxId, nodeId: req.pinnedNodeId };
    }
    this.calls.push(`place ${req.sandboxId}`);
    return { sandboxId: req.sandboxId, nodeId: this.nodes[this.#i++ % this.nodes.length]! };
  }
  override async restore(ref: SandboxRef, snapshot: SnapshotDescriptor, spec: SandboxSpec): Promise<SandboxStatus> {
    if (this.failNextRestore) {
      this.failNextRestore = false;
      this.calls.push(`restore ${ref.sandboxId} failed`);
      throw new SpaceError("internal", "criu restore failed");
    }
    return super.restore(ref, snapshot, spec);
  }
}

class RecordingPersonaliser implements MemberPersonaliser {
  readonly inits: Array<{ sandboxId: string; body: SandboxInit }> = [];
  failNext = false;
  async init(ref: SandboxRef, body: SandboxInit): Promise<void> {
    if (this.failNext) {
      this.failNext = false;
      throw new Error("envd /init refused");
    }
    this.inits.push({ sandboxId: ref.sandboxId, body });
  }
}

async function setup(engine: "pglite" | "postgres", o: { gate?: GateMode; size?: number; refillQuietMs?: number; demandWindowMs?: number } = {}) {
  const t = await freshDb(engine);
  const tenant = await createTenant(t.db, { name: "a" });
  for (const [id, name, envs] of [[N1, "n1", [ENV]], [N2, "n2", []]] as const) {
    await registerNode(t.db, {
      id, name, address: "http://127.0.0.1:9",
      capacity: { networkSlots: 100, memoryMib: 65536, vcpu: 32, diskMib: 1_000_000 },
      usableEnvironments: [...envs],
      templates: [{ templateId: "base", rootfsSizeMib: 451, environment: ENV }],
    });
  }
  const substrate = new RoundRobinSubstrate();
  const registry = new Registry();
  const metrics = warmPoolMetrics(registry);
  const personaliser = new RecordingPersonaliser();
  const gate = o.gate ?? "off";
  const nodes = new StoreNodeDirectory(t.db);
  const templates = new StoreTemplates(t.db);
  let adoption!: WarmPoolAdoption;
  const layer = createSandboxLayer({
    db: t.db, log, defaults: SHAPE, substrate,
    warmPools: (sandboxes) => (adoption = new WarmPoolAdoption({ db: t.db, sandboxes, nodes, templates, personaliser, gate, metrics, log })),
  });
  const reconciler = createWarmPoolReconciler({
    db: t.db, sandboxes: layer.sandboxes, templates, nodes, gate, metrics, log, poolTenant: () => adoption.poolTenant(), maxParallelCreates: 10,
    ...(o.refillQuietMs ? { refillQuietMs: o.refillQuietMs, refillMaxDeferMs: 60_000 } : {}),
    ...(o.demandWindowMs ? { demandWindowMs: o.demandWindowMs } : {}),
  });
  await upsertWarmPool(t.db, { name: "base", size: o.size ?? 3, ...SHAPE });
  /** Reconcile until the pool holds `n` ready members (level-triggered: a few passes). */
  const fill = async (n = o.size ?? 3) => {
    for (let i = 0; i < 20; i++) {
      await reconciler.reconcileAll();
      await reconciler.settle();
      const ready = (await listSlots(t.db, "base")).filter((s) => s.state === "ready").length;
      if (ready >= n) return;
    }
    assert.fail(`pool never reached ${n} ready members: ${JSON.stringify(await listSlots(t.db, "base"))}`);
  };
  const counter = async (name: string) => (await registry.getSingleMetric(name)!.get()).values.reduce((a, v) => a + v.value, 0);
  return { ...t, tenant, ...layer, substrate, adoption, reconciler, personaliser, fill, registry, counter, poolTenant: await adoption.poolTenant() };
}

for (const engine of testEngines()) {
  describe(`warm pools on ${engine.name}`, { skip: engine.skip }, () => {
    test("Native reservations: only the create naming a reserved member adopts it; a released one goes back; a lapsed one is refused for a retry under a new id", async () => {
      const s = await setup(engine.name);
      try {
        await s.fill();
        const sig = () => AbortSignal.timeout(5000);
        const id = await s.sandboxes.reserveWarm(s.tenant.id, input(), sig());
        assert.ok(id, "a ready member is reserved");
        const slot = (await listSlots(s.db, "base")).find((x) => x.sandboxId === id)!;
        assert.equal(slot.state, "reserved");
        assert.equal(slot.reservedFor, s.tenant.id);
        assert.equal(await s.sandboxes.isReservedWarm(s.tenant.id, id), true);
        const other = await s.sandboxes.create(s.tenant.id, input(), sig());
        assert.notEqual(other.id, id, "an id-less create never takes a reserved member");
        const mine = await s.sandboxes.create(s.tenant.id, input({ id, envVars: { R: "1" } }), sig());
        assert.equal(mine.id, id, "the create naming it adopts it");
        assert.equal(mine.tenantId, s.tenant.id);
        assert.deepEqual(s.personaliser.inits.find((i) => i.sandboxId === id)?.body.envVars, { R: "1" });
        assert.equal(await s.sandboxes.isReservedWarm(s.tenant.id, id), false);

        await s.fill();
        const released = (await s.sandboxes.reserveWarm(s.tenant.id, input(), sig()))!;
        await s.sandboxes.releaseWarm(s.tenant.id, released);
        assert.equal((await listSlots(s.db, "base")).find((x) => x.sandboxId === released)?.state, "ready", "released → ready");

        const lapsed = (await s.sandboxes.reserveWarm(s.tenant.id, input(), sig()))!;
        await moveSlot(s.db, (await listSlots(s.db, "base")).find((x) => x.sandboxId === lapsed)!.id, ["reserved"], "ready", { reservedFor: null });
        await assert.rejects(
          s.sandboxes.create(s.tenant.id, input({ id: lapsed }), sig()),
          (e: unknown) => e instanceof SpaceError && e.code === "unavailable" && e.retryable === true,
          "the id names a member that is no longer reserved: refused, retryable",
        );
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("fills to size; a create adopts a member, personalised without a restart; the pool refills", async () => {
      const s = await setup(engine.name);
      try {
        await s.fill();
        const members = (await listSlots(s.db, "base")).map((x) => x.sandboxId);
        const tokens = new Map(
          (await s.db.query<{ id: string; token: string | null }>(`SELECT id, envd_access_token AS token FROM sandboxes WHERE id = ANY($1::text[])`, [members])).map((r) => [r.id, r.token]),
        );
        assert.ok([...tokens.values()].every((t) => t && t.length >= 32), "each member has an envd token of its own");
        assert.equal(new Set(tokens.values()).size, members.length);
        const startsBefore = s.substrate.calls.filter((c) => c.startsWith("start")).length;
        const t0 = Date.now();
        const sb = await s.sandboxes.create(
          s.tenant.id,
          input({ envVars: { WARM: "yes" }, metadata: { who: "caller" }, timeoutSec: 120, allowInternetAccess: false }),
          AbortSignal.timeout(5000),
        );
        assert.ok(members.includes(sb.id), "the sandbox is a pool member (keeps its id)");
        assert.equal(s.substrate.calls.filter((c) => c.startsWith("start")).length, startsBefore, "no start: adopted, not booted");
        assert.equal(sb.tenantId, s.tenant.id);
        assert.equal(sb.state, "running");
        assert.deepEqual(sb.metadata, { who: "caller" }, "pool metadata replaced by the caller's");
        assert.ok(Math.abs(sb.endAt!.getTime() - (t0 + 120_000)) < 2000, "timeout counts from adoption");
        assert.equal(sb.envdAccessToken, tokens.get(sb.id), "a secure create keeps the member's own token");
        const init = s.personaliser.inits.find((i) => i.sandboxId === sb.id);
        assert.deepEqual(init?.body, { envVars: { WARM: "yes" } }, "envd is told the env vars, not a token it has");
        assert.ok(s.substrate.calls.includes(`egress ${sb.id} false`), "egress policy applied live");
        const row = await s.db.one<{ envVars: Record<string, string> }>(`SELECT env_vars AS "envVars" FROM sandboxes WHERE id = $1`, [sb.id]);
        assert.deepEqual(row.envVars, { WARM: "yes" });
        assert.equal((await s.sandboxes.get(s.tenant.id, sb.id)).id, sb.id, "the caller sees it");
        await assert.rejects(s.sandboxes.get(s.poolTenant, sb.id), /not found/, "the pool no longer owns it");
        assert.equal(await s.counter("space_warm_pool_adoptions_total"), 1);
        await s.fill(3);
        const after = await listSlots(s.db, "base");
        assert.equal(after.filter((x) => x.state === "ready").length, 3);
        assert.ok(!after.some((x) => x.sandboxId === sb.id), "the adopted member left the pool");
        // Killing the adopted sandbox is the caller's business now.
        await s.sandboxes.kill(s.tenant.id, sb.id);

        // Nothing to tell envd: the node is called (the member's CPU priority) with an empty init.
        const plain = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.ok(tokens.has(plain.id));
        assert.equal(plain.envdAccessToken, tokens.get(plain.id));
        assert.deepEqual(s.personaliser.inits.find((i) => i.sandboxId === plain.id)?.body, {});
        // A create that is not secure: the member's token is cleared, in envd and in the record.
        const open = await s.sandboxes.create(s.tenant.id, input({ secure: false }), AbortSignal.timeout(5000));
        assert.ok(tokens.has(open.id));
        assert.equal(open.envdAccessToken, null);
        assert.equal((await s.db.one<{ secure: boolean }>(`SELECT secure FROM sandboxes WHERE id = $1`, [open.id])).secure, false);
        assert.deepEqual(s.personaliser.inits.find((i) => i.sandboxId === open.id)?.body, { accessToken: "" });
        // Members made before members had tokens: a secure create gets a new one, sent to envd.
        await s.fill(3);
        const ready = (await listSlots(s.db, "base")).filter((x) => x.state === "ready").map((x) => x.sandboxId);
        await s.db.query(`UPDATE sandboxes SET envd_access_token = NULL, secure = false WHERE id = ANY($1::text[])`, [ready]);
        const fresh = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.ok(ready.includes(fresh.id));
        assert.ok(fresh.envdAccessToken && fresh.envdAccessToken.length >= 32);
        assert.deepEqual(s.personaliser.inits.find((i) => i.sandboxId === fresh.id)?.body, { accessToken: fresh.envdAccessToken });
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("a refill waits until the pool's adoptions are quiet: none starts during a burst, one starts after it", async () => {
      const s = await setup(engine.name, { refillQuietMs: 400 });
      const starts = () => s.substrate.calls.filter((c) => c.startsWith("start")).length;
      try {
        await s.fill();
        const before = starts();
        for (let i = 0; i < 2; i++) await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        // Two passes: the first forgets nothing the second needs to see the window.
        for (let pass = 0; pass < 2; pass++) {
          await s.reconciler.reconcileAll();
          await s.reconciler.settle();
        }
        assert.equal(starts(), before, "no refill within the window after the adoptions");
        assert.equal((await listSlots(s.db, "base")).filter((x) => x.state === "ready").length, 1);
        await new Promise((r) => setTimeout(r, 450));
        await s.fill(3);
        assert.equal(starts(), before + 2, "refilled once the adoptions were quiet");
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("parallel creates never share a member; the rest fall back cold", async () => {
      const s = await setup(engine.name, { size: 5 });
      try {
        await s.fill(5);
        const members = new Set((await listSlots(s.db, "base")).map((x) => x.sandboxId));
        const made = await Promise.all(
          Array.from({ length: 12 }, (_, i) => s.sandboxes.create(s.tenant.id, input({ metadata: { i: String(i) } }), AbortSignal.timeout(10_000))),
        );
        const ids = made.map((m) => m.id);
        assert.equal(new Set(ids).size, 12, "12 distinct sandboxes");
        const adopted = ids.filter((id) => members.has(id));
        assert.equal(adopted.length, 5, "every member adopted exactly once");
        for (const m of made) assert.equal(m.metadata.i !== undefined, true);
        const owners = await s.db.query<{ id: string; tenant: string }>(`SELECT id, tenant_id AS tenant FROM sandboxes WHERE id = ANY($1::text[])`, [adopted]);
        assert.ok(owners.every((o) => o.tenant === s.tenant.id));
        assert.equal(await s.counter("space_warm_pool_adoptions_total"), 5);
        assert.equal(await s.counter("space_warm_pool_misses_total"), 7);
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("an empty pool (or a shape no pool has) creates cold, transparently", async () => {
      const s = await setup(engine.name, { size: 0 });
      try {
        await s.reconciler.reconcileAll();
        const sb = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.ok(s.substrate.calls.includes(`start ${sb.id}`), "booted cold");
        assert.equal(await s.counter("space_warm_pool_misses_total"), 1);
        await upsertWarmPool(s.db, { name: "base", size: 1, ...SHAPE });
        await s.fill(1);
        const other = await s.sandboxes.create(s.tenant.id, input({ resources: { memoryMib: 512 } }), AbortSignal.timeout(5000));
        assert.ok(s.substrate.calls.includes(`start ${other.id}`), "another shape boots cold");
        assert.equal((await listSlots(s.db, "base")).filter((x) => x.state === "ready").length, 1, "the member is untouched");
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("a failed personalisation kills the member and falls back cold", async () => {
      const s = await setup(engine.name, { size: 1 });
      try {
        await s.fill(1);
        const [member] = await listSlots(s.db, "base");
        s.personaliser.failNext = true;
        const sb = await s.sandboxes.create(s.tenant.id, input({ envVars: { A: "1" } }), AbortSignal.timeout(5000));
        assert.notEqual(sb.id, member!.sandboxId);
        assert.ok(s.substrate.calls.includes(`kill ${member!.sandboxId}`), "half-personalised member killed");
        const row = await s.db.one<{ state: string; tenant: string }>(`SELECT state, tenant_id AS tenant FROM sandboxes WHERE id = $1`, [member!.sandboxId]);
        assert.equal(row.tenant, s.poolTenant, "never handed over");
        assert.equal(row.state, "killed");
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("a release change: no old-build member is adopted; old members drain, new ones fill", async () => {
      const s = await setup(engine.name, { size: 2 });
      try {
        await s.db.execute(`DELETE FROM warm_pools`);
        const tpl = await createTemplate(s.db, { tenantId: null, name: "py", public: true });
        const b1 = await createBuild(s.db, { templateId: tpl.id });
        await updateBuild(s.db, b1.id, { status: "ready", rootfsSizeMib: 400 });
        await setRelease(s.db, { tenantId: null, templateId: tpl.id, alias: "py", buildId: b1.id });
        await upsertWarmPool(s.db, { name: "py", size: 2, ...SHAPE });
        for (let i = 0; i < 10 && (await listSlots(s.db, "py")).filter((x) => x.state === "ready").length < 2; i++) {
          await s.reconciler.reconcileAll();
          await s.reconciler.settle();
        }
        const old = await listSlots(s.db, "py");
        assert.deepEqual(old.map((x) => [x.state, x.buildId]), [["ready", b1.id], ["ready", b1.id]]);

        const b2 = await createBuild(s.db, { templateId: tpl.id });
        await updateBuild(s.db, b2.id, { status: "ready", rootfsSizeMib: 400 });
        await setRelease(s.db, { tenantId: null, templateId: tpl.id, alias: "py", buildId: b2.id });
        // Before the reconciler has run: the create must not get a b1 member.
        const cold = await s.sandboxes.create(s.tenant.id, input({ template: "py" }), AbortSignal.timeout(5000));
        assert.ok(!old.some((x) => x.sandboxId === cold.id), "an old-build member was adopted after the release moved");
        assert.ok(s.substrate.calls.includes(`start ${cold.id}`));

        for (let i = 0; i < 10; i++) {
          await s.reconciler.reconcileAll();
          await s.reconciler.settle();
          const now = await listSlots(s.db, "py");
          if (now.length === 2 && now.every((x) => x.state === "ready" && x.buildId === b2.id)) break;
        }
        const fresh = await listSlots(s.db, "py");
        assert.deepEqual(fresh.map((x) => [x.state, x.buildId]), [["ready", b2.id], ["ready", b2.id]]);
        for (const o of old) {
          const row = await s.db.one<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [o.sandboxId]);
          assert.equal(row.state, "killed", "old-build members are killed");
        }
        const warm = await s.sandboxes.create(s.tenant.id, input({ template: "py" }), AbortSignal.timeout(5000));
        assert.ok(fresh.some((x) => x.sandboxId === warm.id), "a new-build member is adopted");
        assert.equal(await s.counter("space_warm_pool_retired_total"), 2);
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("warm_pool_environment (gate on): refused members leave and are replaced; unknown node goes back; draining never adopted", async () => {
      const s = await setup(engine.name, { gate: "on", size: 2 });
      try {
        // Members land on n1 (publishes ENV) and n2 (does not) — as if n2 lost it after they were made.
        s.substrate.nodes = [N1, N2];
        await s.fill(2);
        const slots = await listSlots(s.db, "base");
        const onN2 = slots.find((x) => x.nodeId === N2)!;
        const onN1 = slots.find((x) => x.nodeId === N1)!;
        assert.ok(onN1 && onN2);
        // Make the n2 member the oldest so a claim reaches it first.
        await s.db.execute(`UPDATE warm_pool_slots SET ready_at = now() - interval '1 hour' WHERE id = $1`, [onN2.id]);
        const a = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.equal(a.id, onN1.sandboxId, "adopted only from the node publishing the environment");
        const refused = (await listSlots(s.db, "base")).find((x) => x.id === onN2.id);
        assert.equal(refused?.state, "retiring", "the refused member left the pool");
        s.substrate.nodes = [N1];
        await s.fill(2);
        const now = await listSlots(s.db, "base");
        assert.ok(now.every((x) => x.nodeId === N1 && x.state === "ready"), "refilled on a node publishing the environment");
        assert.equal((await s.db.one<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [onN2.sandboxId])).state, "killed");

        // A member whose node the directory lacks goes back to the pool (not adopted, not retired).
        const [first, second] = now;
        const N3 = "00000000-0000-4000-8000-000000000003";
        await s.db.execute(`UPDATE warm_pool_slots SET node_id = $2, ready_at = now() - interval '2 hour' WHERE id = $1`, [first!.id, N3]);
        await s.db.execute(`UPDATE sandboxes SET node_id = $2 WHERE id = $1`, [first!.sandboxId, N3]);
        const b = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.equal(b.id, second!.sandboxId);
        assert.equal((await listSlots(s.db, "base")).find((x) => x.id === first!.id)?.state, "ready", "unknown node: back in the pool");

        // Draining: never adopted.
        await s.fill(2);
        await setNodeStatus(s.db, N1, "draining");
        const c = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000)).catch((e: unknown) => e);
        // No ready node left for a cold create either (n2 lacks the environment): refused, not adopted.
        assert.ok(c instanceof Error || !(await listSlots(s.db, "base")).some((x) => x.sandboxId === (c as { id: string }).id));
        const st = await listSlots(s.db, "base");
        assert.ok(!st.some((x) => x.state === "adopted"), "nothing adopted on a draining node");
        await deleteNode(s.db, N2);
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("idle policy suspended: members are suspended on their node and still count; a create prefers a running member, then restores a suspended one on its node and personalises it; a failed restore leaves the pool and the create goes cold", async () => {
      const s = await setup(engine.name, { size: 2 });
      const states = async () => (await listSlots(s.db, "base")).map((x) => x.state).sort();
      /** Reconcile (moves and creates finishing) until `ok`. */
      const until = async (ok: () => Promise<boolean>, what: string) => {
        for (let i = 0; i < 20; i++) {
          await s.reconciler.reconcileAll();
          await s.reconciler.settle();
          if (await ok()) return;
        }
        assert.fail(`${what}: ${JSON.stringify(await listSlots(s.db, "base"))}`);
      };
      try {
        await upsertWarmPool(s.db, { name: "base", size: 2, ...SHAPE, idlePolicy: "suspended" });
        await until(async () => (await states()).join() === "suspended,suspended", "2 suspended members");
        const suspended = await listSlots(s.db, "base");
        for (const m of suspended) {
          assert.ok(!s.substrate.running.has(m.sandboxId!), `member ${m.sandboxId} no longer runs on its node`);
          const row = await s.db.one<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [m.sandboxId]);
          assert.equal(row.state, "suspended");
        }
        assert.ok([...s.substrate.snapshots.values()].every((d) => d.parts.length === 0), "checkpoints stay on the node (no upload)");
        assert.equal(s.substrate.calls.filter((c) => c.startsWith("start")).length, 2, "suspended members count toward the size: no refill");
        await s.reconciler.reconcileAll(); // status and gauges are written from what a pass observed
        assert.equal(await s.counter("space_warm_pool_suspended"), 2);
        assert.equal(await s.counter("space_warm_pool_ready"), 0);
        const status = (await getWarmPool(s.db, "base"))!.status as { suspended: number; conditions: Array<{ status: boolean }> };
        assert.equal(status.suspended, 2);
        assert.equal(status.conditions[0]!.status, true, "a pool of suspended members is Ready");

        // One more running member (grown pool, its create finishes before the next pass suspends it).
        await upsertWarmPool(s.db, { name: "base", size: 3, ...SHAPE, idlePolicy: "suspended" });
        await s.reconciler.reconcileAll();
        await s.reconciler.settle();
        assert.equal((await states()).join(), "ready,suspended,suspended");
        const running = (await listSlots(s.db, "base")).find((x) => x.state === "ready")!.sandboxId;
        const first = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.equal(first.id, running, "a running member is preferred over suspended ones");

        const restoresBefore = s.substrate.calls.filter((c) => c.startsWith("restore")).length;
        const sb = await s.sandboxes.create(s.tenant.id, input({ envVars: { WARM: "s" }, metadata: { who: "me" } }), AbortSignal.timeout(5000));
        const member = suspended.find((m) => m.sandboxId === sb.id);
        assert.ok(member, "then a suspended member is adopted");
        assert.equal(s.substrate.calls.filter((c) => c.startsWith("restore")).length, restoresBefore + 1, "restored once");
        assert.ok(s.substrate.calls.includes(`place ${sb.id} pinned ${member.nodeId}`), "restored on its own node");
        assert.equal(sb.state, "running");
        assert.equal(sb.tenantId, s.tenant.id);
        assert.deepEqual(sb.metadata, { who: "me" });
        assert.deepEqual(s.personaliser.inits.find((i) => i.sandboxId === sb.id)?.body, { envVars: { WARM: "s" } });
        assert.ok(sb.envdAccessToken, "the member's own token, kept");
        assert.equal(await s.counter("space_warm_pool_adoptions_total"), 2);

        const last = (await listSlots(s.db, "base")).find((x) => x.state === "suspended")!;
        s.substrate.failNextRestore = true;
        const cold = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
        assert.notEqual(cold.id, last.sandboxId);
        assert.ok(s.substrate.calls.includes(`start ${cold.id}`), "the create went cold");
        const gone = await s.db.one<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [last.sandboxId]);
        assert.equal(gone.state, "killed", "the member that failed to restore left the pool");
        const misses = (await s.registry.getSingleMetric("space_warm_pool_misses_total")!.get()).values;
        assert.ok(misses.some((v) => v.labels.reason === "restore_failed" && v.value === 1));
        await until(async () => (await states()).join() === "suspended,suspended,suspended", "the pool refills with suspended members");
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("a policy change resumes suspended members; a Native reservation of a suspended member restores it at create, and a released one goes back suspended", async () => {
      const s = await setup(engine.name, { size: 2 });
      const states = async () => (await listSlots(s.db, "base")).map((x) => x.state).sort().join();
      const until = async (want: string) => {
        for (let i = 0; i < 20 && (await states()) !== want; i++) {
          await s.reconciler.reconcileAll();
          await s.reconciler.settle();
        }
        assert.equal(await states(), want);
      };
      try {
        await upsertWarmPool(s.db, { name: "base", size: 2, ...SHAPE, idlePolicy: "suspended" });
        await until("suspended,suspended");
        const sig = () => AbortSignal.timeout(5000);
        const released = (await s.sandboxes.reserveWarm(s.tenant.id, input(), sig()))!;
        await s.sandboxes.releaseWarm(s.tenant.id, released);
        assert.equal(await states(), "suspended,suspended", "a released suspended member goes back suspended");
        const id = (await s.sandboxes.reserveWarm(s.tenant.id, input(), sig()))!;
        const mine = await s.sandboxes.create(s.tenant.id, input({ id, envVars: { R: "2" } }), sig());
        assert.equal(mine.id, id);
        assert.equal(mine.state, "running");
        assert.ok(s.substrate.running.has(id), "restored before it was handed over");
        assert.deepEqual(s.personaliser.inits.find((i) => i.sandboxId === id)?.body.envVars, { R: "2" });

        await upsertWarmPool(s.db, { name: "base", size: 2, ...SHAPE, idlePolicy: "running" });
        await until("ready,ready");
        for (const m of await listSlots(s.db, "base")) assert.ok(s.substrate.running.has(m.sandboxId!), `${m.sandboxId} runs again`);
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("suspend_when_memory_short: suspends while the node's published free memory is under the floor, waits for a heartbeat to judge it again, resumes once memory frees up", async () => {
      const s = await setup(engine.name, { size: 3 });
      let clock = 0; // 0: the real clock; else a fixed instant
      const r = createWarmPoolReconciler({
        db: s.db, sandboxes: s.sandboxes, templates: new StoreTemplates(s.db), nodes: new StoreNodeDirectory(s.db), gate: "off",
        metrics: warmPoolMetrics(s.registry), log, poolTenant: () => s.adoption.poolTenant(), idleSettleMs: 60_000,
        now: () => (clock ? new Date(clock) : new Date()),
      });
      const pass = async () => {
        await r.reconcileAll();
        await r.settle();
      };
      const states = async () => (await listSlots(s.db, "base")).map((x) => x.state).sort().join();
      // Budget 65536 MiB × 2 (overcommit) = 131072; floor 50 % = 65536 MiB free.
      const publish = (usedMib: number) => heartbeatNode(s.db, N1, { used: { networkSlots: 3, memoryMib: usedMib, vcpu: 3, diskMib: 0 } });
      try {
        await s.fill(3);
        await upsertWarmPool(s.db, { name: "base", size: 3, ...SHAPE, idlePolicy: "suspend_when_memory_short", minFreeMemoryPercent: 50 });
        await publish(131072 - 65536 + 100);
        clock = Date.now() + 120_000; // the members are older than the settle window
        await pass();
        assert.equal(await states(), "ready,ready,suspended", "one member (256 MiB) lifts the node back above the floor");
        clock = 0;
        await pass();
        assert.equal(await states(), "ready,ready,suspended", "the node's published memory predates the suspend: not judged again yet");
        await publish(131072 - 65536 + 100 - 256); // the next heartbeat
        clock = Date.now() + 120_000;
        await pass();
        assert.equal(await states(), "ready,ready,suspended", "above the floor, but a resume would sink it again: stays suspended");
        await publish(1024);
        await pass();
        assert.equal(await states(), "ready,ready,ready", "memory freed up: resumed");
        for (const m of await listSlots(s.db, "base")) assert.ok(s.substrate.running.has(m.sandboxId!));
      } finally {
        await r.stop();
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("a pool with a max size grows for a burst to the creates it could have served, up to its max, and back as they age out", async () => {
      const s = await setup(engine.name, { size: 1, demandWindowMs: 2000 });
      const pass = async () => {
        await s.reconciler.reconcileAll();
        await s.reconciler.settle();
      };
      const ready = async () => (await listSlots(s.db, "base")).filter((x) => x.state === "ready").length;
      const status = async () => (await getWarmPool(s.db, "base"))!.status as { size: number; demand?: number };
      try {
        await upsertWarmPool(s.db, { name: "base", size: 1, maxSize: 4, ...SHAPE });
        await s.fill(1);
        // Another shape is no demand for this pool.
        await s.sandboxes.create(s.tenant.id, input({ resources: { vcpu: 2 } }), AbortSignal.timeout(10_000));
        await pass();
        assert.equal(await ready(), 1, "a create of another shape does not grow it");
        // A burst of 6: one adopts the member, five go cold.
        await Promise.all(Array.from({ length: 6 }, () => s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(10_000))));
        await s.fill(4);
        await pass();
        assert.equal(await ready(), 4, "grown to its max size, not to the burst's 6");
        assert.deepEqual([(await status()).size, (await status()).demand], [4, 6]);
        assert.equal((await getWarmPool(s.db, "base"))!.size, 1, "the spec keeps its size");
        // The burst ages out of the window: the pool goes back to its size.
        await new Promise((r) => setTimeout(r, 2100));
        await pass();
        await pass();
        assert.equal(await ready(), 1, "back to its size");
        assert.deepEqual([(await status()).size, (await status()).demand], [1, 0]);
        // Without a max size, a burst does not grow it.
        await upsertWarmPool(s.db, { name: "base", size: 1, ...SHAPE });
        await Promise.all(Array.from({ length: 3 }, () => s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(10_000))));
        await s.fill(1);
        await pass();
        assert.equal(await ready(), 1, "no max size: never beyond its size");
        assert.equal((await status()).demand, undefined);
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });

    test("pool tenant refills never adopt; a deleted pool drains", async () => {
      const s = await setup(engine.name, { size: 2 });
      try {
        await s.fill(2);
        await s.db.execute(`DELETE FROM warm_pools WHERE name = 'base'`);
        await s.reconciler.reconcileAll();
        await s.reconciler.settle();
        assert.equal((await listSlots(s.db, "base")).length, 0);
        const live = await s.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM sandboxes WHERE tenant_id = $1 AND state = 'running'`, [s.poolTenant]);
        assert.equal(live.n, 0);
      } finally {
        await s.reconciler.stop();
        await s.drop();
      }
    });
  });
}

describe("warm pools: pure parts", () => {
  test("idleMoves: the policy decision", () => {
    const now = new Date("2026-01-01T12:00:00Z");
    const old = new Date(now.getTime() - 60_000);
    const m = (slotId: string, state: IdleMember["state"], o: Partial<IdleMember> = {}): IdleMember => ({
      slotId, state, nodeId: N1, memoryMib: 1024, movedAt: old, readyAt: new Date(old.getTime() + Number(slotId)), ...o,
    });
    // 8 GiB × 2 (overcommit) = 16 GiB budget; 20 % floor = 3276.8 MiB.
    const node = (usedMib: number) => ({ capacity: { networkSlots: 100, memoryMib: 8192, vcpu: 8, diskMib: 100_000 }, used: { networkSlots: 0, memoryMib: usedMib, vcpu: 0, diskMib: 0 } });
    const nodes = (usedMib: number) => new Map([[N1, node(usedMib)]]);
    const opts = { now, settleMs: 10_000, busyNodes: new Set<string>() };
    const short = { policy: "suspend_when_memory_short", minFreeMemoryPercent: 20 } as const;
    const members = [m("1", "ready"), m("2", "ready"), m("3", "ready")];
    const cases: Array<[string, ReturnType<typeof idleMoves>, { suspend: string[]; resume: string[] }]> = [
      ["running: suspended members resume", idleMoves({ policy: "running", minFreeMemoryPercent: 20 }, [m("1", "suspended"), m("2", "ready")], nodes(0), opts), { suspend: [], resume: ["1"] }],
      ["running: only what fits the node resumes", idleMoves({ policy: "running", minFreeMemoryPercent: 20 }, [m("1", "suspended"), m("2", "suspended")], nodes(16384 - 1500), opts), { suspend: [], resume: ["1"] }],
      ["suspended: every running member on a known node", idleMoves({ policy: "suspended", minFreeMemoryPercent: 20 }, [m("1", "ready"), m("2", "suspended"), m("3", "ready", { nodeId: N2 })], nodes(0), opts), { suspend: ["1"], resume: [] }],
      ["short: plenty free, nothing moves", idleMoves(short, members, nodes(4096), opts), { suspend: [], resume: [] }],
      ["short: under the floor, the newest are suspended until it is met", idleMoves(short, members, nodes(16384 - 1500), opts), { suspend: ["3", "2"], resume: [] }],
      ["short: above the floor again, the oldest resume while it holds", idleMoves(short, [m("1", "suspended"), m("2", "suspended"), m("3", "suspended")], nodes(16384 - 5500), opts), { suspend: [], resume: ["1", "2"] }],
      ["short: a member moved recently, the node is not judged yet", idleMoves(short, [...members.slice(1), m("1", "ready", { movedAt: now })], nodes(16000), opts), { suspend: [], resume: [] }],
      ["short: a member moving now, the node is not judged", idleMoves(short, members, nodes(16000), { ...opts, busyNodes: new Set([N1]) }), { suspend: [], resume: [] }],
      ["short: no published capacity, nothing moves", idleMoves(short, members, new Map([[N1, { capacity: null, used: null }]]), opts), { suspend: [], resume: [] }],
      ["unknown node: nothing moves", idleMoves({ policy: "running", minFreeMemoryPercent: 20 }, [m("1", "suspended")], new Map(), opts), { suspend: [], resume: [] }],
    ];
    for (const [name, got, want] of cases) assert.deepEqual(got, want, name);
  });


  test("SPACE_WARM_POOLS parsing", () => {
    const d = { vcpu: 2, memoryMib: 1024, diskMib: 2048 };
    assert.deepEqual(parseWarmPoolsConfig("", d), []);
    assert.deepEqual(parseWarmPoolsConfig("base=5, py:v2=2:1/512/4096", d), [
      { name: "base", size: 5, maxSize: null, ...d, source: "config" },
      { name: "py:v2", size: 2, maxSize: null, vcpu: 1, memoryMib: 512, diskMib: 4096, source: "config" },
    ]);
    assert.deepEqual(parseWarmPoolsConfig("base=5..50,py=0..8:1/512/4096", d), [
      { name: "base", size: 5, maxSize: 50, ...d, source: "config" },
      { name: "py", size: 0, maxSize: 8, vcpu: 1, memoryMib: 512, diskMib: 4096, source: "config" },
    ]);
    assert.throws(() => parseWarmPoolsConfig("base=5..4", d), /max size 4 must be from size \(5\) to 1000/);
    assert.throws(() => parseWarmPoolsConfig("base=5..2000", d), /max size 2000/);
    assert.throws(() => parseWarmPoolsConfig("base", d), /template=size/);
    assert.throws(() => parseWarmPoolsConfig("base=1,base=2", d), /twice/);
  });

  test("checkMember: environment gate, node status, unknown node, placement", () => {
    const node = { status: "ready", usableEnvironments: [ENV], nodeGroup: "default", labels: { zone: "a" } };
    const bound = { kind: "bound", environment: ENV, source: "t" } as const;
    assert.deepEqual(checkMember(node, "on", bound, {}), { kind: "adopt" });
    assert.deepEqual(checkMember(undefined, "on", bound, {}), { kind: "back", reason: "node_unknown" });
    assert.deepEqual(checkMember({ ...node, usableEnvironments: [] }, "on", bound, {}), { kind: "refuse", reason: "environment_not_usable" });
    assert.deepEqual(checkMember({ ...node, usableEnvironments: [] }, "shadow", bound, {}), { kind: "adopt" });
    assert.deepEqual(checkMember({ ...node, status: "draining" }, "off", bound, {}), { kind: "refuse", reason: "node_not_ready" });
    assert.deepEqual(checkMember({ ...node, status: "unavailable" }, "off", bound, {}), { kind: "refuse", reason: "node_not_ready" });
    assert.deepEqual(checkMember(node, "off", bound, { nodeGroup: "gpu" }), { kind: "back", reason: "other_node_group" });
    assert.deepEqual(checkMember(node, "off", bound, { nodeSelector: { zone: "b" } }), { kind: "back", reason: "selector_mismatch" });
  });

  test("planPool: table", () => {
    const now = new Date("2026-01-01T12:00:00Z");
    const slot = (id: string, state: WarmSlot["state"], o: Partial<WarmSlot> = {}): WarmSlot => ({
      id, pool: "p", buildId: "b1", sandboxId: `sb${id}`, nodeId: N1, state, createdAt: new Date(now.getTime() - 1000),
      updatedAt: new Date(now.getTime() - 1000), readyAt: new Date(now.getTime() - 1000), adoptedAt: null, reason: null, reservedFor: null, ...o,
    });
    const sb = (o: Partial<{ state: string; tenantId: string; nodeId: string; templateId: string; vcpu: number }> = {}) => ({
      state: "running", tenantId: "pool", nodeId: N1, templateId: "t", vcpu: 1, memoryMib: 256, diskMib: 1024, ...o,
    });
    const base = (o: Partial<PlanInput>): PlanInput => ({
      target: { size: 3, templateId: "t", buildId: "b1", ...SHAPE },
      slots: [], sandboxes: new Map(), nodes: new Map([[N1, { status: "ready", usableEnvironments: [ENV] }]]),
      gate: "off", binding: { kind: "none" }, poolTenant: "pool", inflight: new Set(), moving: new Set(),
      idle: { policy: "running", minFreeMemoryPercent: 20 }, idleSettleMs: 10_000, now,
      creatingTimeoutMs: 60_000, reservationTtlMs: 60_000, maxAgeMs: 3_600_000, maxParallelCreates: 4,
      refill: { quietMs: 0, maxDeferMs: 0, shortSince: null }, ...o,
    });
    const ago = (ms: number) => new Date(now.getTime() - ms);
    const adoptedAgo = (ms: number) => ({ slots: [slot("9", "adopted", { adoptedAt: ago(ms) })], sandboxes: new Map([["sb9", sb({ tenantId: "t1" })]]) });
    const cases: Array<[string, Partial<PlanInput>, (p: ReturnType<typeof planPool>) => void]> = [
      ["empty pool creates size", {}, (p) => assert.equal(p.create, 3)],
      [
        "an adoption within the quiet window holds the refill back",
        { ...adoptedAgo(200), refill: { quietMs: 500, maxDeferMs: 3000, shortSince: null } },
        (p) => {
          assert.deepEqual([p.create, p.deferred], [0, 3]);
          assert.deepEqual(p.forget, [], "the handed-over adoption is kept while it dates the window");
        },
      ],
      [
        "adoptions quiet for the window: the refill starts",
        { ...adoptedAgo(600), refill: { quietMs: 500, maxDeferMs: 3000, shortSince: ago(700) } },
        (p) => assert.deepEqual([p.create, p.deferred], [3, 0]),
      ],
      [
        "a steady stream of adoptions defers the refill no longer than maxDeferMs",
        { ...adoptedAgo(10), refill: { quietMs: 500, maxDeferMs: 3000, shortSince: ago(3000) } },
        (p) => assert.deepEqual([p.create, p.deferred], [3, 0]),
      ],
      ["no quiet window (0): refill at once", { ...adoptedAgo(10) }, (p) => assert.deepEqual([p.create, p.deferred], [3, 0])],
      ["parallel cap", { target: { size: 10, templateId: "t", buildId: "b1", ...SHAPE } }, (p) => assert.equal(p.create, 4)],
      [
        "build changed retires",
        { slots: [slot("1", "ready", { buildId: "b0" })], sandboxes: new Map([["sb1", sb()]]) },
        (p) => {
          assert.deepEqual(p.retire, [{ slotId: "1", reason: "build_changed" }]);
          assert.equal(p.create, 3);
        },
      ],
      [
        "shape changed retires",
        { slots: [slot("1", "ready")], sandboxes: new Map([["sb1", sb({ vcpu: 2 })]]) },
        (p) => assert.deepEqual(p.retire, [{ slotId: "1", reason: "shape_changed" }]),
      ],
      [
        "gate on, node without the environment: retired",
        {
          gate: "on", binding: { kind: "bound", environment: ENV, source: "x" },
          nodes: new Map([[N1, { status: "ready", usableEnvironments: [] }]]),
          slots: [slot("1", "ready")], sandboxes: new Map([["sb1", sb()]]),
        },
        (p) => assert.deepEqual(p.retire, [{ slotId: "1", reason: "environment_not_usable" }]),
      ],
      [
        "unknown node: kept",
        { nodes: new Map(), slots: [slot("1", "ready")], sandboxes: new Map([["sb1", sb()]]) },
        (p) => {
          assert.deepEqual(p.retire, []);
          assert.equal(p.status.ready, 1);
          assert.equal(p.create, 2);
        },
      ],
      [
        "draining node: retired",
        { nodes: new Map([[N1, { status: "draining", usableEnvironments: [] }]]), slots: [slot("1", "ready")], sandboxes: new Map([["sb1", sb()]]) },
        (p) => assert.deepEqual(p.retire, [{ slotId: "1", reason: "node_not_ready" }]),
      ],
      [
        "sandbox gone: forgotten",
        { slots: [slot("1", "ready")], sandboxes: new Map([["sb1", sb({ state: "killed" })]]) },
        (p) => assert.deepEqual(p.forget, ["1"]),
      ],
      [
        "adopted and handed over: forgotten; fresh claim still ours: kept",
        { slots: [slot("1", "adopted"), slot("2", "adopted", { adoptedAt: now })], sandboxes: new Map([["sb1", sb({ tenantId: "t1" })], ["sb2", sb()]]) },
        (p) => assert.deepEqual(p.forget, ["1"]),
      ],
      [
        "excess retires the newest",
        {
          target: { size: 1, templateId: "t", buildId: "b1", ...SHAPE },
          slots: [slot("1", "ready", { readyAt: new Date(now.getTime() - 5000) }), slot("2", "ready")],
          sandboxes: new Map([["sb1", sb()], ["sb2", sb()]]),
        },
        (p) => {
          assert.deepEqual(p.retire, [{ slotId: "2", reason: "excess" }]);
          assert.equal(p.create, 0);
        },
      ],
      [
        "stuck creating fails; in-flight creating counts",
        { slots: [slot("1", "creating", { sandboxId: null, createdAt: new Date(now.getTime() - 120_000) }), slot("2", "creating", { sandboxId: null })], inflight: new Set(["2"]) },
        (p) => {
          assert.deepEqual(p.fail, ["1"]);
          assert.equal(p.create, 2);
        },
      ],
      [
        "pool deleted: everything drains",
        { target: null, slots: [slot("1", "ready"), slot("2", "retiring")], sandboxes: new Map([["sb1", sb()], ["sb2", sb()]]) },
        (p) => {
          assert.deepEqual(p.retire, [{ slotId: "1", reason: "pool_deleted" }]);
          assert.deepEqual(p.kill, [{ slotId: "2", sandboxId: "sb2" }]);
          assert.equal(p.create, 0);
          assert.equal(p.status.conditions[0]!.reason, "PoolDeletedOrUnresolved");
        },
      ],
      [
        "suspended members count toward the size and stay suspended; idle policy suspended suspends the running ones",
        {
          idle: { policy: "suspended", minFreeMemoryPercent: 20 },
          slots: [slot("1", "suspended"), slot("2", "ready")],
          sandboxes: new Map([["sb1", sb({ state: "suspended" })], ["sb2", sb()]]),
        },
        (p) => {
          assert.equal(p.create, 1);
          assert.deepEqual(p.suspend, ["2"]);
          assert.deepEqual([p.status.ready, p.status.suspended], [1, 1]);
        },
      ],
      [
        "a suspended member whose sandbox is not suspended is forgotten; one from an old build retires (and is killed)",
        {
          slots: [slot("1", "suspended"), slot("2", "suspended", { buildId: "b0" }), slot("3", "retiring")],
          sandboxes: new Map([["sb1", sb({ state: "killed" })], ["sb2", sb({ state: "suspended" })], ["sb3", sb({ state: "suspended" })]]),
        },
        (p) => {
          assert.deepEqual(p.forget, ["1"]);
          assert.deepEqual(p.retire, [{ slotId: "2", reason: "build_changed" }]);
          assert.deepEqual(p.kill, [{ slotId: "3", sandboxId: "sb3" }], "a suspended sandbox is still killed");
        },
      ],
      [
        "moves: in flight counted; left behind settle to their sandbox's state; stuck ones fail",
        {
          slots: [
            slot("1", "suspending"),
            slot("2", "suspending"),
            slot("3", "resuming"),
            slot("4", "resuming", { updatedAt: new Date(now.getTime() - 120_000) }),
          ],
          sandboxes: new Map([["sb1", sb({ state: "suspending" })], ["sb2", sb({ state: "suspended" })], ["sb3", sb()], ["sb4", sb({ state: "resuming" })]]),
          moving: new Set(["1"]),
        },
        (p) => {
          assert.deepEqual(p.settle, [{ slotId: "2", from: "suspending", to: "suspended" }, { slotId: "3", from: "resuming", to: "ready" }]);
          assert.deepEqual(p.fail, ["4"]);
          assert.equal(p.status.moving, 1);
          assert.equal(p.create, 2);
        },
      ],
      [
        "an expired reservation of a suspended member goes back suspended",
        { slots: [slot("1", "reserved", { updatedAt: new Date(now.getTime() - 120_000) })], sandboxes: new Map([["sb1", sb({ state: "suspended" })]]) },
        (p) => assert.deepEqual(p.unreserve, [{ slotId: "1", to: "suspended" }]),
      ],
      [
        "full pool is Ready",
        { target: { size: 1, templateId: "t", buildId: "b1", ...SHAPE }, slots: [slot("1", "ready")], sandboxes: new Map([["sb1", sb()]]) },
        (p) => assert.deepEqual(p.status.conditions, [{ type: "Ready", status: true, reason: "Full" }]),
      ],
    ];
    for (const [name, o, check] of cases) {
      try {
        check(planPool(base(o)));
      } catch (e) {
        throw new Error(`case '${name}': ${(e as Error).message}`);
      }
    }
  });
});



