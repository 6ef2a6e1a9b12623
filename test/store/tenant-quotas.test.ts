// Tenant quotas and create rate limits in the store, on both engines: admission counts
// every way a sandbox becomes live, and two connections (two API replicas on Postgres)
// racing for a tenant's last slot or a bucket's last token never both win.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { Registry } from "prom-client";
import { SpaceError } from "../../src/core/errors.ts";
import { newExecutionId, newSandboxId, type TenantId } from "../../src/core/ids.ts";
import type { Db, Queryable } from "../../src/store/db.ts";
import { createTenant, ensureTenant } from "../../src/store/tenants.ts";
import { insertSandbox, transitionSandbox } from "../../src/store/sandboxes.ts";
import { takeBucketTokens } from "../../src/store/rate-buckets.ts";
import { createSnapshot } from "../../src/store/snapshots.ts";
import { claimReadySlot, handOverSandbox, insertWarmSlot, listSlots, moveSlot, upsertWarmPool } from "../../src/store/warm-pools.ts";
import {
  WARM_POOL_TENANT_NAME,
  admitLiveSandbox,
  admitNamedSnapshot,
  getQuotaOverrides,
  putQuotaOverrides,
  quotaUsage,
  type QuotaLimits,
  type QuotaOverrides,
} from "../../src/store/tenant-quotas.ts";
import { StoreSandboxRepo } from "../../src/sandboxes/queries.ts";
import { CreateRateLimiter, DbBucketStore } from "../../src/api/rate-limit.ts";
import { freshDb, testEngines, type TestDb } from "../support/db.ts";

const log = pino({ level: "silent" });
const DEFAULTS: QuotaLimits = {
  sandboxes: 100, vcpu: 1000, memoryMib: 1_000_000, diskMib: 10_000_000, snapshots: 100, volumes: 2, volumeMib: 100,
  createsPerS: 0, createBurst: 1, keyCreatesPerS: 0, keyCreateBurst: 1,
};
const none: QuotaOverrides = {
  sandboxes: null, vcpu: null, memoryMib: null, diskMib: null, snapshots: null, volumes: null, volumeMib: null,
  createsPerS: null, createBurst: null, keyCreatesPerS: null, keyCreateBurst: null,
};
const shape = { vcpu: 2, memoryMib: 512, diskMib: 1024 };
const isQuota = (limit: string) => (e: unknown) =>
  e instanceof SpaceError && e.code === "resource_exhausted" && e.detail === "quota_exceeded" && e.message.startsWith(`tenant quota exceeded: ${limit} `);

/** `db` counting the statements sent through it. */
function counting(db: Db): Queryable & { statements: number } {
  const c = {
    statements: 0,
    query: <T,>(sql: string, params?: readonly unknown[]) => (c.statements++, db.query<T>(sql, params)),
    execute: (sql: string, params?: readonly unknown[]) => (c.statements++, db.execute(sql, params)),
    one: <T,>(sql: string, params?: readonly unknown[], what?: string) => (c.statements++, db.one<T>(sql, params, what)),
    maybeOne: <T,>(sql: string, params?: readonly unknown[]) => (c.statements++, db.maybeOne<T>(sql, params)),
    script: (sql: string) => (c.statements++, db.script(sql)),
  };
  return c;
}

function newRow(tenantId: TenantId) {
  return { id: newSandboxId(), tenantId, ...shape };
}

for (const engine of testEngines()) {
  describe(`tenant quotas in the store: ${engine.name}`, { skip: engine.skip, timeout: 120_000 }, () => {
    let t: TestDb;
    /** The second "replica": another pool on Postgres; the same Db on PGlite (one connection, serialised). */
    let other: Db;
    before(async () => {
      t = await freshDb(engine.name);
      other = engine.name === "postgres" ? await t.openAnother() : t.db;
    });
    after(() => t?.drop());

    const tenantWith = async (o: Partial<QuotaOverrides>) => {
      const id = (await createTenant(t.db, { name: `t-${newSandboxId()}` })).id;
      await putQuotaOverrides(t.db, id, { ...none, ...o });
      return id;
    };

    it("overrides round-trip; null falls back to the default", async () => {
      const id = await tenantWith({ sandboxes: 3, createsPerS: 0.5 });
      assert.deepEqual(await getQuotaOverrides(t.db, id), { ...none, sandboxes: 3, createsPerS: 0.5 });
      await putQuotaOverrides(t.db, id, none);
      assert.deepEqual(await getQuotaOverrides(t.db, id), none);
      await assert.rejects(getQuotaOverrides(t.db, "tn_nope" as TenantId), (e: unknown) => e instanceof SpaceError && e.code === "not_found");
    });

    it("two replicas racing for the last sandbox slot: exactly one wins, every round", async () => {
      for (let round = 0; round < 5; round++) {
        const tenant = await tenantWith({ sandboxes: 1 });
        const a = new StoreSandboxRepo(t.db, DEFAULTS);
        const b = new StoreSandboxRepo(other, DEFAULTS);
        const results = await Promise.allSettled([a.insert(newRow(tenant), newExecutionId()), b.insert(newRow(tenant), newExecutionId())]);
        assert.equal(results.filter((r) => r.status === "fulfilled").length, 1, `round ${round}: ${JSON.stringify(results.map((r) => r.status))}`);
        const lost = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
        assert.ok(isQuota("sandboxes")(lost.reason), String(lost.reason));
        assert.equal((lost.reason as SpaceError).message, "tenant quota exceeded: sandboxes 1 of 1");
        assert.equal((await quotaUsage(t.db, tenant)).sandboxes, 1, "no row of the loser");
      }
    });

    it("vCPU and memory quotas name the resource; another tenant is unaffected", async () => {
      const small = await tenantWith({ vcpu: 3 });
      const repo = new StoreSandboxRepo(t.db, DEFAULTS);
      await repo.insert(newRow(small), newExecutionId());
      await assert.rejects(repo.insert(newRow(small), newExecutionId()), (e: unknown) => {
        assert.ok(isQuota("vcpu")(e), String(e));
        assert.match((e as Error).message, /vcpu 2 of 3 in use, 2 more requested/);
        return true;
      });
      const mem = await tenantWith({ memoryMib: 600 });
      await repo.insert(newRow(mem), newExecutionId());
      await assert.rejects(repo.insert(newRow(mem), newExecutionId()), isQuota("memory_mib"));
      const free = await tenantWith({});
      await repo.insert(newRow(free), newExecutionId());
      await repo.insert(newRow(free), newExecutionId());
    });

    it("a kill frees the slot at once; a resume counts and is refused when full", async () => {
      const tenant = await tenantWith({ sandboxes: 1 });
      const repo = new StoreSandboxRepo(t.db, DEFAULTS);
      const first = await repo.insert(newRow(tenant), newExecutionId());
      await transitionSandbox(t.db, first.id, "creating", "running");
      await transitionSandbox(t.db, first.id, "running", "suspending");
      await transitionSandbox(t.db, first.id, "suspending", "suspended");
      // Suspended does not count: another sandbox takes the slot…
      const second = await repo.insert(newRow(tenant), newExecutionId());
      // …so the suspended one cannot come back while it is held.
      await assert.rejects(repo.transition(first.id, ["suspended"], "resuming"), isQuota("sandboxes"));
      assert.equal((await repo.getById(first.id))?.state, "suspended", "the refused resume changed nothing");
      assert.ok(await repo.transition(second.id, ["creating"], "killing"));
      assert.equal((await repo.transition(first.id, ["suspended"], "resuming"))?.state, "resuming");
    });

    it("a warm hand-over counts against the adopter; pool members count against nobody", async () => {
      const pool = (await ensureTenant(t.db, { name: WARM_POOL_TENANT_NAME })).id;
      await putQuotaOverrides(t.db, pool, { ...none, sandboxes: 0 });
      const repo = new StoreSandboxRepo(t.db, DEFAULTS);
      const member = await repo.insert(newRow(pool), newExecutionId());
      await transitionSandbox(t.db, member.id, "creating", "running");
      const adopter = await tenantWith({ sandboxes: 1 });
      await repo.insert(newRow(adopter), newExecutionId());
      const handover = {
        sandboxId: member.id, fromTenant: pool, toTenant: adopter, alias: null, metadata: {}, envVars: {}, envdAccessToken: null,
        trafficAccessToken: null, allowInternetAccess: true, network: {}, lifecycle: { onTimeout: "kill" as const, autoResume: false },
        startedAt: new Date(), endAt: new Date(Date.now() + 60_000),
      };
      await assert.rejects(handOverSandbox(t.db, handover, DEFAULTS), isQuota("sandboxes"));
      assert.equal((await repo.getById(member.id))?.tenantId, pool, "still the pool's");
      const roomy = await tenantWith({ sandboxes: 1 });
      const handed = await handOverSandbox(t.db, { ...handover, toTenant: roomy }, DEFAULTS);
      assert.equal(handed?.tenantId, roomy, "the row as handed over");
      assert.equal(handed?.id, member.id);
      assert.equal((await quotaUsage(t.db, roomy)).sandboxes, 1);
    });

    it("a warm claim admitted by the adopter's quota: a tenant at its limit claims nothing, another claims the member, one statement each", async () => {
      const pool = (await ensureTenant(t.db, { name: WARM_POOL_TENANT_NAME })).id;
      const name = `p-${newSandboxId()}`;
      await upsertWarmPool(t.db, { name, size: 1, ...shape });
      const slot = await insertWarmSlot(t.db, name, null);
      const member = await insertSandbox(t.db, { tenantId: pool, state: "running", templateId: "base", ...shape });
      assert.ok(await moveSlot(t.db, slot.id, ["creating"], "ready", { sandboxId: member.id }));
      const full = await tenantWith({ sandboxes: 1 });
      await new StoreSandboxRepo(t.db, DEFAULTS).insert(newRow(full), newExecutionId());
      const counted = counting(t.db);
      const claim = (tenantId: TenantId) => claimReadySlot(counted, [name], "base", [], "adopted", null, { tenantId, quotas: DEFAULTS, claim: shape });
      await assert.rejects(claim(full), isQuota("sandboxes"));
      assert.equal(counted.statements, 1);
      assert.equal((await listSlots(t.db, name))[0]?.state, "ready", "the refused claim took nothing");
      const claimed = await claim(await tenantWith({}));
      assert.equal(counted.statements, 2);
      assert.equal(claimed?.id, slot.id);
      assert.equal(claimed?.claimedFrom, "ready");
      assert.equal((await listSlots(t.db, name))[0]?.state, "adopted");
    });

    it("two warm hand-overs racing for the adopter's last slot: exactly one wins, in one round trip each", async () => {
      const pool = (await ensureTenant(t.db, { name: WARM_POOL_TENANT_NAME })).id;
      for (let round = 0; round < 5; round++) {
        const adopter = await tenantWith({ sandboxes: 1 });
        const members = [];
        for (let i = 0; i < 2; i++) members.push((await insertSandbox(t.db, { tenantId: pool, state: "running", ...shape })).id);
        const handover = (sandboxId: string) => ({
          sandboxId, fromTenant: pool, toTenant: adopter, alias: null, metadata: {}, envVars: {}, envdAccessToken: null,
          trafficAccessToken: null, allowInternetAccess: true, network: {}, lifecycle: { onTimeout: "kill" as const, autoResume: false },
          startedAt: new Date(), endAt: new Date(Date.now() + 60_000),
        });
        const counted = counting(t.db);
        const results = await Promise.allSettled([handOverSandbox(counted, handover(members[0]!), DEFAULTS), handOverSandbox(other, handover(members[1]!), DEFAULTS)]);
        assert.equal(counted.statements, 1, "the admission and the hand-over are one statement");
        assert.equal(results.filter((r) => r.status === "fulfilled" && r.value !== null).length, 1, `round ${round}: ${JSON.stringify(results)}`);
        const lost = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
        assert.ok(isQuota("sandboxes")(lost.reason), String(lost.reason));
        assert.equal((await quotaUsage(t.db, adopter)).sandboxes, 1);
      }
    });

    it("an admission is one round trip and names the limit with its numbers", async () => {
      const tenant = await tenantWith({ diskMib: 1500 });
      const counted = counting(t.db);
      await admitLiveSandbox(counted, tenant, DEFAULTS, shape, null);
      assert.equal(counted.statements, 1);
      await insertSandbox(t.db, { tenantId: tenant, state: "running", ...shape });
      await assert.rejects(admitLiveSandbox(t.db, tenant, DEFAULTS, shape, null), (e: unknown) => {
        assert.ok(isQuota("disk_mib")(e), String(e));
        assert.deepEqual((e as SpaceError).details, { limit: "disk_mib", used: 1024, requested: 1024, max: 1500 });
        return true;
      });
    });

    it("named snapshots have their own quota", async () => {
      const tenant = await tenantWith({ snapshots: 1 });
      const s = await insertSandbox(t.db, { tenantId: tenant, state: "running", ...shape });
      await t.db.transaction(async (tx) => {
        await admitNamedSnapshot(tx, tenant, DEFAULTS);
        await createSnapshot(tx, { sandboxId: s.id, purpose: "named", name: "one" });
      });
      await assert.rejects(t.db.transaction((tx) => admitNamedSnapshot(tx, tenant, DEFAULTS)), isQuota("snapshots"));
    });

    it("a bucket's last token goes to exactly one of two replicas; it refills from the database clock", async () => {
      for (let round = 0; round < 5; round++) {
        const key = `tenant:race-${round}-${newSandboxId()}`;
        const r = await Promise.all([takeBucketTokens(t.db, key, 0.001, 1), takeBucketTokens(other, key, 0.001, 1)]);
        assert.deepEqual(r.map((x) => x.granted).sort(), [0, 1]);
      }
      const key = `tenant:refill-${newSandboxId()}`;
      assert.equal((await takeBucketTokens(t.db, key, 1000, 1)).granted, 1);
      // 1000 tokens per second: the next millisecond has one again.
      await new Promise((r) => setTimeout(r, 20));
      assert.equal((await takeBucketTokens(t.db, key, 1000, 1)).granted, 1);
    });

    it("the limiter refuses with Retry-After from the bucket, per tenant and per key", async () => {
      const tenant = await tenantWith({ createsPerS: 0.5, createBurst: 2 });
      const limiter = new CreateRateLimiter({ store: new DbBucketStore(t.db), db: t.db, defaults: DEFAULTS, metrics: new Registry(), log });
      await limiter.admit(tenant, "k1");
      await limiter.admit(tenant, "k1");
      await assert.rejects(limiter.admit(tenant, "k1"), (e: unknown) => {
        assert.ok(e instanceof SpaceError && e.code === "resource_exhausted" && e.detail === "rate_limited", String(e));
        assert.equal(e.details?.["retryAfterS"], 2);
        assert.match(e.message, /0\.5 creates per second per tenant \(burst 2\)/);
        return true;
      });
      const keyed = await tenantWith({ keyCreatesPerS: 0.01, keyCreateBurst: 1 });
      await limiter.admit(keyed, "key-a");
      await assert.rejects(limiter.admit(keyed, "key-a"), /per API key/);
      await limiter.admit(keyed, "key-b");
    });

    it("the limiter leases tokens: a create waits on the bucket only at a key's first use", async () => {
      const tenant = await tenantWith({ createsPerS: 200, createBurst: 1000, keyCreatesPerS: 0 });
      const store = new DbBucketStore(t.db);
      let takes = 0;
      // While `gate` is pending, a take does not answer: a create that waits on one does not finish.
      let open = () => {};
      let gate = Promise.resolve();
      const gated = { take: async (...a: Parameters<DbBucketStore["take"]>) => (takes++, await gate, store.take(...a)) };
      const limiter = new CreateRateLimiter({ store: gated, db: t.db, defaults: DEFAULTS, metrics: new Registry(), log });
      try {
        await limiter.admit(tenant, null);
        assert.equal(takes, 1, "the first create takes a lease (50: 200/s × 0.25 s)");
        gate = new Promise((r) => (open = r));
        const stuck = new Promise((r) => setTimeout(() => r("stuck"), 10_000).unref());
        for (let i = 0; i < 40; i++) {
          assert.notEqual(await Promise.race([limiter.admit(tenant, null), stuck]), "stuck", `create ${i} waited on the store`);
        }
        assert.equal(takes, 2, "one take ahead of need, in the background, once half the lease was spent");
        open();
        for (let i = 0; i < 60; i++) await limiter.admit(tenant, null);
        assert.ok(takes <= 5, `takes ${takes}`);
      } finally {
        open();
        await limiter.close();
      }
      // The held tokens went back: 1000 − 101 spent, give or take the refill (capped at the burst).
      const left = await takeBucketTokens(t.db, `tenant:${tenant}`, 200, 1000, 0);
      assert.ok(left.tokens >= 1000 - 101 - 1, `tokens ${left.tokens}`);
    });

    it("two replicas leasing one bucket admit no more than it allows", async () => {
      const tenant = await tenantWith({ createsPerS: 40, createBurst: 20, keyCreatesPerS: 0 });
      const replicas = [t.db, other].map((db) => new CreateRateLimiter({ store: new DbBucketStore(db), db, defaults: DEFAULTS, metrics: new Registry(), log }));
      try {
        const t0 = performance.now();
        const admitted = await Promise.all(
          replicas.map(async (r) => {
            let n = 0;
            for (;;) {
              try {
                await r.admit(tenant, null);
                n++;
              } catch (e: unknown) {
                assert.ok(e instanceof SpaceError && e.detail === "rate_limited", String(e));
                return n;
              }
            }
          }),
        );
        const elapsedS = (performance.now() - t0) / 1000;
        const total = admitted[0]! + admitted[1]!;
        // Every token spent was granted by the shared bucket: its burst plus its refill meanwhile, never more.
        assert.ok(total <= 20 + Math.ceil(40 * elapsedS), `admitted ${JSON.stringify(admitted)} in ${elapsedS} s`);
        // And a lease (10) held by one replica is the most the other is kept from.
        assert.ok(total >= 10, `admitted ${JSON.stringify(admitted)}`);
      } finally {
        await Promise.all(replicas.map((r) => r.close()));
      }
    });
  });
}

describe("the limiter fails open when its store is down", () => {
  it("a dead database lets creates through, counts them and logs once", { timeout: 60_000 }, async () => {
    const t = await freshDb("pglite");
    try {
      const tenant = (await createTenant(t.db, { name: "acme" })).id;
      await putQuotaOverrides(t.db, tenant, { ...none, createsPerS: 0.001, createBurst: 1 });
      const metrics = new Registry();
      const lines: string[] = [];
      const sink = pino({ level: "warn" }, { write: (l: string) => void lines.push(l) });
      const limiter = new CreateRateLimiter({ store: new DbBucketStore(null, "postgres://space:x@127.0.0.1:1/none"), db: t.db, defaults: DEFAULTS, metrics, log: sink });
      for (let i = 0; i < 3; i++) await limiter.admit(tenant, "k");
      const failOpen = (await metrics.getSingleMetric("space_rate_limiter_fail_open_total")?.get())?.values[0]?.value;
      assert.equal(failOpen, 3);
      assert.equal(lines.filter((l) => l.includes("fail open")).length, 1, lines.join(""));
    } finally {
      await t.drop();
    }
  });
});
