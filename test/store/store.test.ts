// One conformance suite for the store, run against PGlite and (when SPACE_TEST_DATABASE_URL
// is set) real Postgres, each in a fresh database.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { SpaceError } from "../../src/core/errors.ts";
import { newNodeId, type TenantId } from "../../src/core/ids.ts";
import type { Db } from "../../src/store/db.ts";
import { loadMigrations, migrate, schemaVersion } from "../../src/store/migrate.ts";
import { createTenant, ensureTenant, setTenantDisabled } from "../../src/store/tenants.ts";
import { createApiKey, hashSecret, lookupApiKey, revokeApiKey } from "../../src/store/api-keys.ts";
import { createToken, hasScope, revokeToken, verifyToken } from "../../src/store/tokens.ts";
import * as sb from "../../src/store/sandboxes.ts";
import * as ops from "../../src/store/operations.ts";
import { createExecution, latestExecution, transitionExecution } from "../../src/store/executions.ts";
import { heartbeatNode, listNodes, markUnavailableNodes, registerNode, setNodeStatus, getNode } from "../../src/store/nodes.ts";
import { createBuild, createTemplate, resolveTemplate, setRelease, updateBuild, appendBuildLogs, getBuild } from "../../src/store/templates.ts";
import { appendCommandOutput, createCommand, finishCommand, markCommandRunning, readCommandOutput } from "../../src/store/commands.ts";
import { addSnapshotPart, createSnapshot, latestSnapshot, updateSnapshot } from "../../src/store/snapshots.ts";
import { ensureClusterValue, getClusterValue, setClusterValue, setClusterValueIfAbsent } from "../../src/store/cluster.ts";
import { currentLeaseHolder, startLeaderElection } from "../../src/store/leader.ts";
import { freshDb, testEngines, waitFor, type TestDb } from "../support/db.ts";

const isCode = (code: string, msg?: RegExp) => (e: unknown) => {
  assert.ok(e instanceof SpaceError, `expected SpaceError, got ${String(e)}`);
  assert.equal(e.code, code, e.message);
  if (msg) assert.match(e.message, msg);
  return true;
};

describe("sandbox transition table (pure)", () => {
  it("every target is a known state and killed is terminal", () => {
    for (const [from, tos] of Object.entries(sb.transitions)) {
      assert.ok(sb.sandboxStates.includes(from as sb.SandboxState));
      for (const to of tos) assert.ok(sb.sandboxStates.includes(to), `${from} → ${to}`);
    }
    assert.deepEqual(sb.transitions.killed, []);
    assert.ok(sb.canTransition("running", "killing"));
    assert.ok(!sb.canTransition("killed", "running"));
    assert.ok(!sb.canTransition("suspended", "running"), "restore goes through resuming");
  });
  it("canonical request hash ignores key order", () => {
    assert.equal(ops.requestHash({ a: 1, b: [1, { y: 2, x: 1 }] }), ops.requestHash({ b: [1, { x: 1, y: 2 }], a: 1 }));
    assert.notEqual(ops.requestHash({ a: 1 }), ops.requestHash({ a: 2 }));
  });
});

for (const engine of testEngines()) {
  describe(`store conformance: ${engine.name}`, { skip: engine.skip }, () => {
    let t: TestDb;
    let db: Db;
    /** A second connection pool on the same database (Postgres) or the same Db (PGlite). */
    let db2: Db;
    let tenant: TenantId;
    let other: TenantId;
    before(async () => {
      t = await freshDb(engine.name);
      db = t.db;
      db2 = engine.name === "postgres" ? await t.openAnother() : db;
      tenant = (await createTenant(db, { name: "acme" })).id;
      other = (await createTenant(db, { name: "globex" })).id;
    });
    after(async () => {
      await t?.drop();
    });

    const newSandbox = (over: Partial<sb.NewSandbox> = {}) =>
      sb.insertSandbox(db, { tenantId: tenant, vcpu: 2, memoryMib: 512, diskMib: 1024, ...over });

    // ------------------------------------------------------------ migrations
    it("migrations: applied once, idempotent, concurrent migrators serialize", async () => {
      const latest = Math.max(...loadMigrations().map((m) => m.version));
      assert.equal(await schemaVersion(db), latest);
      assert.deepEqual((await migrate(db)).applied, []);
      const fresh = await freshDb(engine.name, { migrate: false });
      try {
        const dbs = engine.name === "postgres" ? [fresh.db, await fresh.openAnother(), await fresh.openAnother()] : [fresh.db, fresh.db, fresh.db];
        const results = await Promise.all(dbs.map((d) => migrate(d)));
        assert.deepEqual(results.map((r) => r.applied.length).sort(), [0, 0, loadMigrations().length]);
        const rows = await fresh.db.query<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version");
        assert.deepEqual(rows.map((r) => r.version), loadMigrations().map((m) => m.version));
      } finally {
        await fresh.drop();
      }
    });

    it("db: transaction commits, rolls back on throw, and PGlite refuses re-entry", async () => {
      await db.transaction(async (tx) => {
        await tx.query("INSERT INTO cluster (key, value) VALUES ('tx-ok', '1'::jsonb)");
      });
      await assert.rejects(
        db.transaction(async (tx) => {
          await tx.query("INSERT INTO cluster (key, value) VALUES ('tx-rollback', '1'::jsonb)");
          throw new Error("boom");
        }),
        /boom/,
      );
      assert.equal(await getClusterValue(db, "tx-ok"), 1);
      assert.equal(await getClusterValue(db, "tx-rollback"), undefined);
      if (engine.name === "pglite") {
        await assert.rejects(db.transaction(() => db.query("SELECT 1")), /inside its own transaction/);
      }
      // Concurrent transactions do not interleave (PGlite mutex) and both commit.
      await Promise.all(
        [1, 2, 3].map((i) =>
          db.transaction(async (tx) => {
            await tx.query(`INSERT INTO cluster (key, value) VALUES ($1, $2::jsonb)`, [`c${i}`, String(i)]);
            await new Promise((r) => setTimeout(r, 5));
            await tx.query(`UPDATE cluster SET value = $2::jsonb WHERE key = $1`, [`c${i}`, String(i * 10)]);
          }),
        ),
      );
      assert.deepEqual(await Promise.all([1, 2, 3].map((i) => getClusterValue(db, `c${i}`))), [10, 20, 30]);
    });

    // ------------------------------------------------------------ tenants, keys, tokens
    it("tenants: unique names, ensure is idempotent", async () => {
      await assert.rejects(createTenant(db, { name: "acme" }), isCode("already_exists"));
      const a = await ensureTenant(db, { name: "acme" });
      assert.equal(a.id, tenant);
      const [x, y] = await Promise.all([ensureTenant(db, { name: "initech" }), ensureTenant(db2, { name: "initech" })]);
      assert.equal(x.id, y.id);
    });

    it("api keys: plaintext returned once, only its sha256 stored; revoke and disable refuse it", async () => {
      const { apiKey, plaintext } = await createApiKey(db, { tenantId: tenant, name: "ci" });
      assert.match(plaintext, /^e2b_[0-9a-f]{40}$/);
      const stored = await db.one<Record<string, unknown>>("SELECT * FROM api_keys WHERE id = $1", [apiKey.id]);
      assert.equal(stored.hash, hashSecret(plaintext));
      assert.ok(!JSON.stringify(stored).includes(plaintext.slice(4)), "plaintext stored");
      assert.ok(!("hash" in apiKey), "hash leaked into the API type");
      const found = await lookupApiKey(db, plaintext);
      assert.equal(found?.tenant.id, tenant);
      assert.equal(found?.apiKey.id, apiKey.id);
      assert.equal(await lookupApiKey(db, plaintext + "x"), undefined);
      // A bootstrap can reuse a key it handed out before.
      const fixed = "e2b_" + "ab".repeat(20);
      await createApiKey(db, { tenantId: other, plaintext: fixed });
      assert.equal((await lookupApiKey(db, fixed))?.tenant.id, other);
      await setTenantDisabled(db, other, true);
      assert.equal(await lookupApiKey(db, fixed), undefined);
      await setTenantDisabled(db, other, false);
      await revokeApiKey(db, tenant, apiKey.id);
      assert.equal(await lookupApiKey(db, plaintext), undefined);
      await assert.rejects(revokeApiKey(db, other, apiKey.id), isCode("not_found"));
    });

    it("tokens: scopes, expiry, hash at rest", async () => {
      const { token, plaintext } = await createToken(db, { tenantId: tenant, scopes: ["sandboxes:*", "templates:read"] });
      const v = await verifyToken(db, plaintext);
      assert.equal(v?.id, token.id);
      assert.ok(hasScope(v!, "sandboxes:create") && hasScope(v!, "templates:read") && !hasScope(v!, "templates:write"));
      const raw = await db.one<Record<string, unknown>>("SELECT * FROM tokens WHERE id = $1", [token.id]);
      assert.ok(!JSON.stringify(raw).includes(plaintext.slice(4)));
      const expired = await createToken(db, { tenantId: tenant, scopes: ["*"], expiresAt: new Date(Date.now() - 1000) });
      assert.equal(await verifyToken(db, expired.plaintext), undefined);
      const admin = await createToken(db, { tenantId: null, scopes: ["*"] });
      assert.equal((await verifyToken(db, admin.plaintext))?.tenantId, null);
      // A revoke names the tenant: another tenant's token is not found, and stays valid.
      await assert.rejects(revokeToken(db, other, token.id), isCode("not_found"));
      assert.equal((await verifyToken(db, plaintext))?.id, token.id);
      assert.ok((await revokeToken(db, tenant, token.id)).revokedAt);
      assert.equal(await verifyToken(db, plaintext), undefined);
    });

    // ------------------------------------------------------------ sandboxes
    it("sandboxes: insert, get, tenant isolation (not_found, never another tenant's row)", async () => {
      const s = await newSandbox({ metadata: { user: "u1" }, envVars: { SECRET: "x" }, lifecycle: { onTimeout: "pause", autoResume: true } });
      assert.match(s.id, /^[a-z0-9]{20}$/);
      assert.equal(s.state, "creating");
      assert.equal(s.generation, 1);
      assert.deepEqual(s.metadata, { user: "u1" });
      assert.deepEqual(s.lifecycle, { onTimeout: "pause", autoResume: true });
      assert.equal((await sb.getSandbox(db, s.id, tenant)).id, s.id);
      await assert.rejects(sb.getSandbox(db, s.id, other), isCode("not_found", new RegExp(s.id)));
      await assert.rejects(newSandbox({ id: s.id }), isCode("already_exists"));
      await assert.rejects(sb.transitionSandbox(db, s.id, "creating", "running", {}, { tenantId: other }), isCode("not_found"));
    });

    it("sandboxes: transitions follow the table, bump generation, conflicts → failed_precondition", async () => {
      const s = await newSandbox();
      const node = newNodeId();
      const r = await sb.transitionSandbox(db, s.id, ["creating"], "running", { nodeId: node, address: "10.0.0.2", endAt: new Date(Date.now() + 60_000) });
      assert.equal(r.state, "running");
      assert.equal(r.generation, 2);
      assert.equal(r.nodeId, node);
      assert.ok(r.startedAt instanceof Date);
      // Not in `from`.
      await assert.rejects(sb.transitionSandbox(db, s.id, ["creating"], "running"), isCode("failed_precondition", /is running/));
      // Not allowed by the table at all: a programming error, refused before SQL.
      await assert.rejects(sb.transitionSandbox(db, s.id, ["suspended"], "running"), isCode("internal", /illegal/));
      // Two writers racing on the same generation: exactly one wins.
      const results = await Promise.allSettled([
        sb.transitionSandbox(db, s.id, ["running"], "pausing", {}, { generation: 2 }),
        sb.transitionSandbox(db2, s.id, ["running"], "killing", {}, { generation: 2 }),
      ]);
      assert.equal(results.filter((x) => x.status === "fulfilled").length, 1);
      const lost = results.find((x) => x.status === "rejected") as PromiseRejectedResult;
      assert.ok(isCode("failed_precondition")(lost.reason));
      const now = await sb.getSandbox(db, s.id);
      assert.equal(now.generation, 3);
      // Stale generation.
      await assert.rejects(sb.transitionSandbox(db, s.id, [now.state], "failed", {}, { generation: 2 }), isCode("failed_precondition", /generation 3, expected 2/));
      const k = now.state === "killing" ? now : await sb.transitionSandbox(db, s.id, [now.state], "killing", {}, { generation: 3 });
      const dead = await sb.transitionSandbox(db, s.id, "killing", "killed");
      assert.equal(dead.generation, k.generation + 1);
      assert.ok(dead.killedAt instanceof Date);
      // patch with state guard
      await assert.rejects(sb.patchSandbox(db, s.id, { endAt: new Date() }, { inStates: ["running"] }), isCode("failed_precondition"));
      await assert.rejects(sb.transitionSandbox(db, "nosuchsandbox0000000", "running", "killing"), isCode("not_found"));
    });

    it("sandboxes: list filters (state set, metadata AND, template, startedAfter)", async () => {
      const t2 = (await createTenant(db, { name: "filters" })).id;
      const mk = (o: Partial<sb.NewSandbox>) => sb.insertSandbox(db, { tenantId: t2, vcpu: 1, memoryMib: 256, diskMib: 512, ...o });
      const a = await mk({ metadata: { env: "prod", team: "x" }, templateId: "base" });
      const b = await mk({ metadata: { env: "prod", team: "y" }, templateId: "base" });
      const c = await mk({ metadata: { env: "dev" }, templateId: "other" });
      const aStarted = new Date(Date.now() - 3600_000);
      await sb.transitionSandbox(db, a.id, "creating", "running", { startedAt: aStarted });
      await sb.transitionSandbox(db, b.id, "creating", "running");
      const ids = async (f: Omit<sb.SandboxListFilter, "tenantId">) => (await sb.listSandboxes(db, { tenantId: t2, ...f })).items.map((s) => s.id);
      assert.deepEqual(await ids({}), [a.id, b.id, c.id]);
      assert.deepEqual(await ids({ order: "desc" }), [c.id, b.id, a.id]);
      assert.deepEqual(await ids({ states: ["running"] }), [a.id, b.id]);
      assert.deepEqual(await ids({ states: ["creating", "paused"] }), [c.id]);
      assert.deepEqual(await ids({ metadata: { env: "prod" } }), [a.id, b.id]);
      assert.deepEqual(await ids({ metadata: { env: "prod", team: "y" } }), [b.id]);
      assert.deepEqual(await ids({ metadata: { env: "prod", team: "z" } }), []);
      assert.deepEqual(await ids({ templateId: "other" }), [c.id]);
      assert.deepEqual(await ids({ startedAfter: new Date(Date.now() - 60_000) }), [b.id]);
      assert.deepEqual(await ids({ startedAfter: aStarted }), [a.id, b.id], "at or after: a sandbox's own startedAt lists it");
      assert.deepEqual((await sb.listSandboxes(db, { tenantId: other })).items, []);
      await assert.rejects(sb.listSandboxes(db, { tenantId: t2, cursor: "garbage" }), isCode("invalid_argument"));
    });

    for (const order of ["asc", "desc"] as const) {
      it(`sandboxes: ${order} pagination never skips or repeats while rows come and go`, async () => {
        const t3 = (await createTenant(db, { name: `paging-${order}` })).id;
        const mk = () => sb.insertSandbox(db, { tenantId: t3, vcpu: 1, memoryMib: 256, diskMib: 512 });
        const stable = new Set<string>();
        const churn: string[] = [];
        for (let i = 0; i < 60; i++) {
          const s = await mk();
          if (i % 3 === 0) churn.push(s.id);
          else stable.add(s.id);
        }
        const seen: string[] = [];
        let cursor: string | undefined;
        let pages = 0;
        do {
          const page = await sb.listSandboxes(db2, { tenantId: t3, order, limit: 7, cursor });
          seen.push(...page.items.map((s) => s.id));
          cursor = page.nextCursor ?? undefined;
          pages++;
          // Between pages, concurrently: new rows arrive and churn rows are deleted.
          await Promise.all([mk(), mk(), churn.length ? sb.deleteSandbox(db, churn.shift()!) : null]);
        } while (cursor && pages < 100);
        assert.equal(new Set(seen).size, seen.length, "a row was returned twice");
        for (const id of stable) assert.ok(seen.includes(id), `stable row ${id} skipped`);
      });
    }

    it("sandboxes: expired and per-node queries", async () => {
      const node = newNodeId();
      const s = await newSandbox();
      await sb.transitionSandbox(db, s.id, "creating", "running", { nodeId: node, endAt: new Date(Date.now() - 1000) });
      assert.ok((await sb.listExpiredSandboxes(db)).some((x) => x.id === s.id));
      assert.deepEqual((await sb.listSandboxesOnNode(db, node)).map((x) => x.id), [s.id]);
    });

    // ------------------------------------------------------------ executions, snapshots
    it("executions: numbered attempts and transitions", async () => {
      const s = await newSandbox();
      const node = newNodeId();
      const e1 = await createExecution(db, { sandboxId: s.id, nodeId: node });
      const e2 = await createExecution(db, { sandboxId: s.id });
      assert.deepEqual([e1.attempt, e2.attempt], [1, 2]);
      assert.equal((await latestExecution(db, s.id))?.id, e2.id);
      const r = await transitionExecution(db, e1.id, ["pending"], "running");
      assert.ok(r.startedAt instanceof Date);
      const f = await transitionExecution(db, e1.id, ["running"], "failed", { error: "oom" });
      assert.equal(f.error, "oom");
      assert.ok(f.endedAt instanceof Date);
      await assert.rejects(transitionExecution(db, e1.id, ["running"], "ended"), isCode("failed_precondition"));
      const sn = await createSnapshot(db, { sandboxId: s.id, executionId: e2.id, nodeId: node, environment: "env-abc" });
      assert.equal(sn.attempt, 2);
      await addSnapshotPart(db, sn.id, { kind: "memory", key: `snapshots/${s.id}/mem`, sizeBytes: 10, sha256: "00" });
      const d = await updateSnapshot(db, sn.id, { state: "durable" }, { from: ["creating", "local", "uploading"] });
      assert.ok(d.durableAt instanceof Date);
      assert.equal(d.parts.length, 1);
      assert.equal(d.sizeBytes, 10);
      assert.equal((await latestSnapshot(db, s.id))?.id, sn.id);
      await assert.rejects(updateSnapshot(db, sn.id, { state: "uploading" }, { from: ["local"] }), isCode("failed_precondition"));
    });

    // ------------------------------------------------------------ nodes
    it("nodes: register (upsert), heartbeat, unavailable after grace, drain survives heartbeat", async () => {
      const id = newNodeId();
      const n = await registerNode(db, { id, name: "node-a", address: "http://10.0.0.1:3002", capacity: { vcpu: 8 }, usableEnvironments: ["env-1"] });
      assert.equal(n.status, "ready");
      const again = await registerNode(db, { id, name: "node-a", address: "http://10.0.0.1:3003" });
      assert.equal(again.address, "http://10.0.0.1:3003");
      assert.equal((await listNodes(db)).filter((x) => x.id === id).length, 1);
      const hb = await heartbeatNode(db, id, { used: { vcpu: 2 }, usableEnvironments: ["env-1", "env-2"], templates: [{ build: "b1" }] });
      assert.deepEqual(hb.usableEnvironments, ["env-1", "env-2"]);
      assert.deepEqual(hb.used, { vcpu: 2 });
      await new Promise((r) => setTimeout(r, 30));
      const gone = await markUnavailableNodes(db, 10);
      assert.ok(gone.some((x) => x.id === id));
      assert.equal((await heartbeatNode(db, id)).status, "ready");
      await setNodeStatus(db, id, "draining");
      assert.equal((await heartbeatNode(db, id)).status, "draining");
      assert.equal((await registerNode(db, { id, name: "node-a", address: "x" })).status, "draining");
      await assert.rejects(heartbeatNode(db, newNodeId()), isCode("not_found"));
      await assert.rejects(getNode(db, "not-a-uuid"), isCode("not_found"));
    });

    // ------------------------------------------------------------ operations
    it("operations: idempotency (same body replays, other body conflicts, also after completion)", async () => {
      const req = { template: "base", vcpu: 2, metadata: { a: "1" } };
      const a = await ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.create", request: req, idempotencyKey: "k-1", deadlineMs: 30 * 60_000 });
      assert.equal(a.replayed, false);
      assert.equal(a.operation.state, "queued");
      assert.ok(a.operation.deadlineAt instanceof Date);
      const b = await ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.create", request: { metadata: { a: "1" }, vcpu: 2, template: "base" }, idempotencyKey: "k-1" });
      assert.equal(b.replayed, true);
      assert.equal(b.operation.id, a.operation.id);
      await assert.rejects(
        ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.create", request: { ...req, vcpu: 4 }, idempotencyKey: "k-1" }),
        isCode("aborted", /^idempotency_conflict$/),
      );
      // Keys are per tenant.
      const c = await ops.enqueueOperation(db, { tenantId: other, kind: "sandbox.create", request: req, idempotencyKey: "k-1" });
      assert.notEqual(c.operation.id, a.operation.id);
      // Without a key, every call is new.
      const n1 = await ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.kill", request: {} });
      const n2 = await ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.kill", request: {} });
      assert.notEqual(n1.operation.id, n2.operation.id);
      // Completed operations replay with their result.
      const del = await ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.delete", request: { id: "x" }, idempotencyKey: "del-1" });
      await db.execute("UPDATE operations SET state = 'claimed', claimed_by = 'w' WHERE id = $1", [del.operation.id]);
      await ops.completeOperation(db, del.operation.id, { deleted: true }, { claimer: "w" });
      const replay = await ops.enqueueOperation(db, { tenantId: tenant, kind: "sandbox.delete", request: { id: "x" }, idempotencyKey: "del-1" });
      assert.equal(replay.replayed, true);
      assert.equal(replay.operation.state, "succeeded");
      assert.deepEqual(replay.operation.result, { deleted: true });
      await assert.rejects(ops.getOperation(db, a.operation.id, other), isCode("not_found"));
      // clean the queue for the claim tests below
      await db.execute("UPDATE operations SET state = 'failed', failure_code = 'internal' WHERE state IN ('queued', 'claimed')");
    });

    it("operations: concurrent duplicates converge to one row", async () => {
      const pools = engine.name === "postgres" ? [db, db2, await t.openAnother(), await t.openAnother()] : [db];
      const calls = Array.from({ length: 24 }, (_, i) =>
        ops.enqueueOperation(pools[i % pools.length]!, { tenantId: tenant, kind: "sandbox.create", request: { n: 1 }, idempotencyKey: "race-1" }),
      );
      const results = await Promise.all(calls);
      assert.equal(new Set(results.map((r) => r.operation.id)).size, 1);
      assert.equal(results.filter((r) => !r.replayed).length, 1);
      const rows = await db.query("SELECT id FROM operations WHERE tenant_id = $1 AND idempotency_key = 'race-1'", [tenant]);
      assert.equal(rows.length, 1);
      // Racing with a different body: one row, the rest replay or conflict.
      const mixed = await Promise.allSettled(
        Array.from({ length: 12 }, (_, i) =>
          ops.enqueueOperation(pools[i % pools.length]!, { tenantId: tenant, kind: "x", request: { v: i % 2 }, idempotencyKey: "race-2" }),
        ),
      );
      const ok = mixed.filter((m) => m.status === "fulfilled") as PromiseFulfilledResult<{ operation: ops.Operation; replayed: boolean }>[];
      assert.equal(new Set(ok.map((m) => m.value.operation.id)).size, 1);
      for (const m of mixed) if (m.status === "rejected") assert.ok(isCode("aborted", /idempotency_conflict/)(m.reason));
      await db.execute("UPDATE operations SET state = 'failed', failure_code = 'internal' WHERE state IN ('queued', 'claimed')");
    });

    it("operations: two claimers with SKIP LOCKED never double-claim", async () => {
      const N = 60;
      for (let i = 0; i < N; i++) await ops.enqueueOperation(db, { tenantId: tenant, kind: "claim.test", request: { i } });
      const got = new Map<string, string>();
      const claimer = async (d: Db, name: string) => {
        for (;;) {
          const batch = await ops.claimOperations(d, { claimer: name, limit: 4, staleMs: 60_000, kinds: ["claim.test"] });
          if (batch.length === 0) return;
          for (const op of batch) {
            assert.ok(!got.has(op.id), `${op.id} claimed by ${got.get(op.id)} and ${name}`);
            got.set(op.id, name);
            assert.equal(op.state, "claimed");
            assert.equal(op.claimedBy, name);
          }
        }
      };
      await Promise.all([claimer(db, "w1"), claimer(db2, "w2")]);
      assert.equal(got.size, N);
      const dup = await db.query("SELECT id FROM operations WHERE kind = 'claim.test' AND claim_count <> 1");
      assert.deepEqual(dup, []);
    });

    it("operations: stale claims are re-claimed and the old claimer is fenced", async () => {
      const { operation } = await ops.enqueueOperation(db, { tenantId: tenant, kind: "stale.test", request: {} });
      const [c1] = await ops.claimOperations(db, { claimer: "dead", limit: 1, staleMs: 60_000, kinds: ["stale.test"] });
      assert.equal(c1?.id, operation.id);
      assert.deepEqual(await ops.claimOperations(db, { claimer: "alive", limit: 1, staleMs: 60_000, kinds: ["stale.test"] }), []);
      assert.deepEqual(await ops.heartbeatOperations(db, "dead", [operation.id]), [operation.id]);
      await new Promise((r) => setTimeout(r, 40));
      const [c2] = await ops.claimOperations(db, { claimer: "alive", limit: 1, staleMs: 20, kinds: ["stale.test"] });
      assert.equal(c2?.id, operation.id);
      assert.equal(c2?.claimCount, 2);
      assert.deepEqual(await ops.heartbeatOperations(db, "dead", [operation.id]), []);
      await assert.rejects(ops.completeOperation(db, operation.id, { by: "dead" }, { claimer: "dead" }), isCode("aborted"));
      const done = await ops.completeOperation(db, operation.id, { by: "alive" }, { claimer: "alive" });
      assert.equal(done.state, "succeeded");
      assert.ok(done.succeededAt instanceof Date);
      // Idempotent finish; failing a succeeded op is a precondition failure.
      assert.equal((await ops.completeOperation(db, operation.id, { by: "alive" }, { claimer: "alive" })).state, "succeeded");
      await assert.rejects(ops.failOperation(db, operation.id, { code: "internal", message: "x" }), isCode("failed_precondition"));
    });

    it("operations: deadlines expire, fail carries code and message, list pages", async () => {
      const { operation } = await ops.enqueueOperation(db, { tenantId: other, kind: "late", request: {}, deadlineAt: new Date(Date.now() - 1) });
      const expired = await ops.expireOperations(db);
      assert.ok(expired.some((o) => o.id === operation.id && o.failureCode === "deadline_exceeded"));
      const f = await ops.enqueueOperation(db, { tenantId: other, kind: "bad", request: {} });
      const failed = await ops.failOperation(db, f.operation.id, { code: "invalid_request", message: "vcpu 0 must be positive" });
      assert.equal(failed.failureMessage, "vcpu 0 must be positive");
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const p = await ops.listOperations(db, { tenantId: other, limit: 1, cursor });
        seen.push(...p.items.map((o) => o.id));
        cursor = p.nextCursor ?? undefined;
      } while (cursor);
      const all = await db.query<{ id: string }>("SELECT id FROM operations WHERE tenant_id = $1 ORDER BY queued_at, seq", [other]);
      assert.deepEqual(seen, all.map((r) => r.id));
    });

    it("operations: NOTIFY wakes a listener on enqueue; waitForOperation returns on completion", async () => {
      const payloads: string[] = [];
      const unlisten = await db2.listen(ops.OPERATIONS_CHANNEL, (p) => payloads.push(p));
      try {
        const { operation } = await db.transaction((tx) => ops.enqueueOperation(tx, { tenantId: tenant, kind: "notify.test", request: {} }));
        await waitFor(() => payloads.includes(operation.id), { timeoutMs: 3000, what: "NOTIFY space_operations" });
        const waiting = ops.waitForOperation(db2, operation.id, { timeoutMs: 5000, pollMs: 60_000 });
        await new Promise((r) => setTimeout(r, 20));
        await ops.failOperation(db, operation.id, { code: "unavailable", message: "no node" });
        const t0 = Date.now();
        const done = await waiting;
        assert.equal(done.state, "failed");
        assert.ok(Date.now() - t0 < 3000, "waitForOperation did not wake on NOTIFY");
      } finally {
        await unlisten();
      }
    });

    // ------------------------------------------------------------ templates
    it("templates: builds, releases, resolve by alias/tag/id with tenant visibility", async () => {
      const base = await createTemplate(db, { tenantId: null, name: "base", public: true });
      const b1 = await createBuild(db, { templateId: base.id, vcpu: 2 });
      await updateBuild(db, b1.id, { status: "building" });
      await appendBuildLogs(db, b1.id, "step 1\n");
      await appendBuildLogs(db, b1.id, "step 2\n");
      const ready = await updateBuild(db, b1.id, { status: "ready", rootfsSizeMib: 451, environment: "env-x" });
      assert.ok(ready.startedAt && ready.finishedAt);
      assert.equal((await getBuild(db, b1.id)).logs, "step 1\nstep 2\n");
      await setRelease(db, { tenantId: null, templateId: base.id, alias: "base", buildId: b1.id });
      const r = await resolveTemplate(db, tenant, "base");
      assert.equal(r.build.id, b1.id);
      assert.equal(r.build.rootfsSizeMib, 451);
      assert.equal(r.template.id, base.id);
      assert.equal((await resolveTemplate(db, tenant, base.id)).build.id, b1.id);
      // A tenant's own alias shadows the platform one; other tenants still see the platform's.
      const mine = await createTemplate(db, { tenantId: tenant, name: "mybase" });
      const b2 = await createBuild(db, { templateId: mine.id, status: "ready" });
      await setRelease(db, { tenantId: tenant, templateId: mine.id, alias: "base", buildId: b2.id });
      assert.equal((await resolveTemplate(db, tenant, "base")).build.id, b2.id);
      assert.equal((await resolveTemplate(db, other, "base")).build.id, b1.id);
      await assert.rejects(resolveTemplate(db, other, mine.id), isCode("not_found", new RegExp(mine.id)));
      await assert.rejects(resolveTemplate(db, tenant, "base:v9"), isCode("not_found", /base:v9/));
      await setRelease(db, { tenantId: tenant, templateId: mine.id, alias: "base", tag: "v9", buildId: b2.id });
      assert.equal((await resolveTemplate(db, tenant, "base:v9")).release?.tag, "v9");
      await assert.rejects(createTemplate(db, { tenantId: tenant, name: "mybase" }), isCode("already_exists"));
    });

    // ------------------------------------------------------------ commands, cluster, warm pool
    it("commands: idempotent by key, output paged by seq with byte offsets", async () => {
      const s = await newSandbox();
      const spec = { cmd: "bash", args: ["-c", "echo hi"] };
      const a = await createCommand(db, { sandboxId: s.id, tenantId: tenant, cmd: spec, idempotencyKey: "c1" });
      const b = await createCommand(db, { sandboxId: s.id, tenantId: tenant, cmd: { args: ["-c", "echo hi"], cmd: "bash" }, idempotencyKey: "c1" });
      assert.equal(b.command.id, a.command.id);
      assert.ok(b.replayed);
      await assert.rejects(createCommand(db, { sandboxId: s.id, cmd: { cmd: "ls" }, idempotencyKey: "c1" }), isCode("aborted", /idempotency_conflict/));
      await markCommandRunning(db, a.command.id, 4242);
      const appended = await Promise.all(
        Array.from({ length: 10 }, (_, i) => appendCommandOutput(db, a.command.id, i % 2 ? "stderr" : "stdout", Buffer.from(`line ${i}\n`))),
      );
      assert.deepEqual(appended.map((x) => x.seq).sort((x, y) => x - y), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      const p1 = await readCommandOutput(db, a.command.id, { limit: 4 });
      const p2 = await readCommandOutput(db, a.command.id, { afterSeq: p1.nextSeq, limit: 100 });
      const all = [...p1.chunks, ...p2.chunks];
      assert.deepEqual(all.map((c) => c.seq), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      let offset = 0;
      for (const c of all) {
        assert.equal(c.offsetBytes, offset);
        assert.ok(c.data instanceof Uint8Array);
        offset += c.data.byteLength;
      }
      const done = await finishCommand(db, a.command.id, { state: "exited", exitCode: 0 });
      assert.equal(done.outputBytes, offset);
      assert.equal((await finishCommand(db, a.command.id, { state: "failed" })).state, "exited");
      const empty = await readCommandOutput(db, a.command.id, { afterSeq: 10 });
      assert.deepEqual(empty, { chunks: [], nextSeq: 10 });
    });

    it("cluster kv", async () => {
      assert.equal(await setClusterValueIfAbsent(db, "substrate", "direct"), true);
      assert.equal(await setClusterValueIfAbsent(db, "substrate", "kubernetes"), false);
      assert.equal(await getClusterValue(db, "substrate"), "direct");
      assert.equal(await ensureClusterValue(db, "substrate", "kubernetes"), "direct");
      await setClusterValue(db, "facts", { a: [1, 2] });
      assert.deepEqual(await getClusterValue(db, "facts"), { a: [1, 2] });
    });

    // ------------------------------------------------------------ leader election
    it("leader election: exactly one leads; an abandoned leader is replaced within ~2× lease", { timeout: 20_000 }, async () => {
      const leaseMs = 600;
      const dbs = engine.name === "postgres" ? [await t.openAnother(), await t.openAnother()] : [db, db];
      const events: string[] = [];
      const start = (d: Db, name: string) =>
        startLeaderElection({
          db: d,
          name: "controller-test",
          holder: name,
          leaseMs,
          onElected: () => void events.push(`${name}:elected`),
          onDemoted: () => void events.push(`${name}:demoted`),
        });
      const [e1, e2] = await Promise.all([start(dbs[0]!, "c1"), start(dbs[1]!, "c2")]);
      try {
        await waitFor(() => e1.isLeader() || e2.isLeader(), { timeoutMs: 3000, what: "a leader" });
        // Hold steady for a few renewals: never two leaders at once.
        const until = Date.now() + 3 * leaseMs;
        while (Date.now() < until) {
          assert.ok(!(e1.isLeader() && e2.isLeader()), "two leaders");
          await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal([e1, e2].filter((e) => e.isLeader()).length, 1);
        const [leader, follower] = e1.isLeader() ? [e1, e2] : [e2, e1];
        const epoch = leader.epoch()!;
        assert.equal((await currentLeaseHolder(db, "controller-test"))?.holder, e1.isLeader() ? "c1" : "c2");
        // The leader dies without releasing its lease.
        const t0 = Date.now();
        await leader.abandon();
        await waitFor(() => follower.isLeader(), { timeoutMs: 2 * leaseMs + 500, intervalMs: 10, what: "takeover" });
        const took = Date.now() - t0;
        assert.ok(took <= 2 * leaseMs + 200, `takeover took ${took} ms`);
        assert.ok(follower.epoch()! > epoch, "epoch must grow on a change of holder");
        // A clean stop releases at once: a new contender leads without waiting for expiry.
        const e3 = await start(dbs[0]!, "c3");
        const t1 = Date.now();
        await follower.stop();
        await waitFor(() => e3.isLeader(), { timeoutMs: 2000, intervalMs: 10, what: "takeover after release" });
        assert.ok(Date.now() - t1 < leaseMs, "released lease was not taken over at once");
        await e3.stop();
      } finally {
        await e1.stop();
        await e2.stop();
      }
      assert.ok(events.filter((e) => e.endsWith(":elected")).length >= 2);
    });
  });
}
