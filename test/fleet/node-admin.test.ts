/**
 * Admin node routes over a fresh database (PGlite, and Postgres when configured):
 * registration with verify and its refusals (403/409/422, nothing stored), heartbeats
 * checked against the registered address, address change re-verified, drain, fence,
 * liveness marking a silent node unavailable and its sandboxes lost.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import Fastify from "fastify";
import { installErrorHandler } from "../../src/api/error-body.ts";
import { registerNodeAdminRoutes, type NodeAdminDeps } from "../../src/api/admin/nodes.ts";
import { createLogger } from "../../src/core/log.ts";
import { freshDb, testEngines } from "../support/db.ts";
import { startNodeLiveness } from "../../src/controller/node-liveness.ts";
import { StoreSandboxRepo } from "../../src/sandboxes/queries.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { insertSandbox, transitionSandbox } from "../../src/store/sandboxes.ts";
import type { NodeId } from "../../src/core/ids.ts";
import { createControlPlaneLink } from "../../src/node/ctl/registration.ts";
import type { NodeInventory } from "../../src/contract/node-api.ts";

const ADMIN = "admin-token-0123456789";
const INTERNAL = "internal-token-0123456789";
const log = createLogger("silent", "test");

for (const engine of testEngines()) {
  describe(`node admin routes on ${engine.name}`, { skip: engine.skip }, () => {
    async function setup(opts: { evacuate?: NodeAdminDeps["evacuate"]; labelPrefixes?: string[] } = {}) {
      const t = await freshDb(engine.name);
      /** address → id the "node" answers with at /health. */
      const answers = new Map<string, string>();
      const app = Fastify();
      installErrorHandler(app);
      registerNodeAdminRoutes(app, {
        db: t.db,
        adminToken: ADMIN,
        internalToken: INTERNAL,
        log,
        verifyNode: async (address) => {
          const id = answers.get(address);
          if (id === undefined) throw new Error("connect ECONNREFUSED");
          return { nodeId: id };
        },
        ...(opts.evacuate ? { evacuate: opts.evacuate } : {}),
        ...(opts.labelPrefixes ? { labelPrefixes: opts.labelPrefixes } : {}),
      });
      await app.ready();
      const call = async (method: "GET" | "POST" | "DELETE", url: string, body?: unknown, token = INTERNAL) => {
        const r = await app.inject({
          method,
          url,
          headers: { authorization: `Bearer ${token}` },
          ...(body !== undefined ? { payload: body as object } : {}),
        });
        // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies read field by field in assertions
        return { status: r.statusCode, body: r.body ? (JSON.parse(r.body) as Record<string, any>) : {} };
      };
      return {
        t,
        app,
        answers,
        call,
        async close() {
          await app.close();
          await t.drop();
        },
      };
    }

    const reg = (id: string, address: string, o: Record<string, unknown> = {}) => ({
      id,
      name: `node-${id.slice(0, 4)}`,
      address,
      verify: true,
      node_group: "g1",
      labels: { zone: "a" },
      ...o,
    });

    test("registration with verify; refusals store nothing", async () => {
      const s = await setup();
      try {
        const id = randomUUID();
        const other = randomUUID();
        s.answers.set("http://10.9.0.1:3002", id);
        s.answers.set("http://10.9.0.2:3002", other);

        // 403: a wrong credential (unknown token).
        assert.equal((await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.0.1:3002"), "nope")).status, 403);
        // 422: the node at the address answers with another id; 422: unreachable.
        const wrong = await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.0.2:3002"));
        assert.equal(wrong.status, 422);
        assert.match(wrong.body.message, new RegExp(`answered with id ${other}, not ${id}`));
        assert.equal((await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.0.3:3002"))).status, 422);
        assert.equal(
          (await s.call("GET", "/admin/api/v1/nodes", undefined, ADMIN)).body.nodes.length,
          0,
          "refusals store nothing",
        );

        const ok = await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.0.1:3002"));
        assert.equal(ok.status, 201, JSON.stringify(ok.body));
        assert.equal(ok.body.status, "ready");
        assert.equal(ok.body.node_group, "g1");
        assert.ok(ok.body.verified_at);
        // The admin token registers too.
        assert.equal((await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.0.1:3002"), ADMIN)).status, 200);

        // 409: same id, other name (two hosts share a node-id file).
        const dup = await s.call("POST", "/admin/api/v1/nodes", { ...reg(id, "http://10.9.0.1:3002"), name: "impostor" });
        assert.equal(dup.status, 409);
        assert.match(dup.body.message, /registered as 'node-/);
        // 409: another id under a ready node's name.
        s.answers.set("http://10.9.0.4:3002", other);
        assert.equal(
          (await s.call("POST", "/admin/api/v1/nodes", { ...reg(other, "http://10.9.0.4:3002"), name: `node-${id.slice(0, 4)}` }))
            .status,
          409,
        );
        const stored = (await s.call("GET", `/admin/api/v1/nodes/${id}`, undefined, ADMIN)).body;
        assert.equal(stored.name, `node-${id.slice(0, 4)}`);
        assert.equal((await s.call("GET", "/admin/api/v1/nodes", undefined, ADMIN)).body.nodes.length, 1);
        // Listing needs the admin credential, not the node's.
        assert.equal((await s.call("GET", "/admin/api/v1/nodes")).status, 403);
      } finally {
        await s.close();
      }
    });

    test("heartbeats are checked against the registered address; an address change re-verifies", async () => {
      const s = await setup();
      try {
        const id = randomUUID();
        s.answers.set("http://10.9.1.1:3002", id);
        assert.equal((await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.1.1:3002"))).status, 201);
        const hb = await s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, {
          address: "http://10.9.1.1:3002",
          capacity: { networkSlots: 5, vcpu: 4, memoryMib: 4096, diskMib: 1000 },
        });
        assert.equal(hb.status, 200);
        assert.equal(hb.body.status, "ready");
        // A heartbeat that finds the node past its memory target (85% of 4096 = 3481.6 MiB)
        // records the sandboxes it holds (none here); one near it (under by less than 1% of the
        // host's memory) keeps it; one clearly under it clears it.
        const fullSlots = async () => (await s.t.db.one<{ n: number | null }>(`SELECT memory_full_slots AS n FROM nodes WHERE id = $1`, [id])).n;
        const measured = (memoryAvailableMib: number) =>
          s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, {
            address: "http://10.9.1.1:3002",
            capacity: { networkSlots: 5, vcpu: 4, memoryMib: 4096, diskMib: 1000 },
            used: { memoryAvailableMib, memoryPressure: 0 },
          });
        assert.equal((await measured(400)).status, 200);
        assert.equal(await fullSlots(), 0);
        assert.equal((await measured(630)).status, 200);
        assert.equal(await fullSlots(), 0);
        assert.equal((await measured(1000)).status, 200);
        assert.equal(await fullSlots(), null);
        const moved = await s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, { address: "http://10.9.1.2:3002" });
        assert.equal(moved.status, 409);
        assert.match(moved.body.message, /register again/);
        assert.equal((await s.call("POST", `/admin/api/v1/nodes/${randomUUID()}/heartbeat`, { address: "x" })).status, 404);

        // New address, verify not even asked: verified anyway. A wrong answer there is refused and the old address kept.
        s.answers.set("http://10.9.1.2:3002", randomUUID());
        assert.equal(
          (await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.1.2:3002", { verify: false }))).status,
          422,
        );
        assert.equal((await s.call("GET", `/admin/api/v1/nodes/${id}`, undefined, ADMIN)).body.address, "http://10.9.1.1:3002");
        s.answers.set("http://10.9.1.2:3002", id);
        const re = await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.1.2:3002", { verify: false }));
        assert.equal(re.status, 200);
        assert.equal(re.body.address, "http://10.9.1.2:3002");
      } finally {
        await s.close();
      }
    });

    test("drain, fence, ready; forced drain without an evacuator (no sandbox service) is 501", async () => {
      const s = await setup();
      try {
        const id = randomUUID();
        s.answers.set("http://10.9.2.1:3002", id);
        await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.2.1:3002"));
        const forced = await s.call("POST", `/admin/api/v1/nodes/${id}/drain`, { mode: "forced" }, ADMIN);
        assert.equal(forced.status, 501);
        assert.match(forced.body.message, /suspend\/restore/);
        assert.equal(
          (await s.call("POST", `/admin/api/v1/nodes/${id}/drain`, { mode: "gentle" })).status,
          403,
          "nodes cannot drain themselves",
        );
        const d = await s.call("POST", `/admin/api/v1/nodes/${id}/drain`, { mode: "gentle" }, ADMIN);
        assert.equal(d.body.status, "draining");
        assert.equal(d.body.drain_mode, "gentle");
        // Heartbeats and re-registration keep the drain.
        assert.equal(
          (await s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, { address: "http://10.9.2.1:3002" })).body.status,
          "draining",
        );
        assert.equal((await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.2.1:3002"))).body.status, "draining");
        // Fence: node writes refused.
        assert.equal(
          (await s.call("POST", `/admin/api/v1/nodes/${id}/fence`, { reason: "disk errors" }, ADMIN)).body.status,
          "fenced",
        );
        const hb = await s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, { address: "http://10.9.2.1:3002" });
        assert.equal(hb.status, 403);
        assert.match(hb.body.message, /fenced/);
        assert.equal((await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.2.1:3002"))).status, 403);
        assert.equal((await s.call("POST", `/admin/api/v1/nodes/${id}/ready`, {}, ADMIN)).body.status, "ready");
        assert.equal(
          (await s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, { address: "http://10.9.2.1:3002" })).status,
          200,
        );
        assert.equal((await s.call("DELETE", `/admin/api/v1/nodes/${id}`, undefined, ADMIN)).status, 204);
      } finally {
        await s.close();
      }
    });

    test("forced drain: the node is draining (forced) before the evacuation runs; the answer reports each sandbox", async () => {
      const seen: string[] = [];
      const s: Awaited<ReturnType<typeof setup>> = await setup({
        evacuate: async (nodeId) => {
          const n = (await s.call("GET", `/admin/api/v1/nodes/${nodeId}`, undefined, ADMIN)).body;
          seen.push(`${n.status}/${n.drain_mode}`);
          return {
            moved: 1,
            stayed: 1,
            sandboxes: [
              { sandboxId: "sbx_a", outcome: "moved", toNodeId: "node-b", snapshotId: "snp_1", durationMs: 12 },
              { sandboxId: "sbx_b", outcome: "stayed", reason: "restore on another node failed: no capacity", durationMs: 5 },
            ],
            volumes: { moved: [], stayed: [] },
          };
        },
      });
      try {
        const id = randomUUID();
        s.answers.set("http://10.9.4.1:3002", id);
        await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.4.1:3002"));
        const f = await s.call("POST", `/admin/api/v1/nodes/${id}/drain`, { mode: "forced" }, ADMIN);
        assert.equal(f.status, 200, JSON.stringify(f.body));
        assert.deepEqual(seen, ["draining/forced"]);
        assert.equal(f.body.status, "draining");
        assert.equal(f.body.drain_mode, "forced");
        assert.equal(f.body.evacuation.moved, 1);
        assert.equal(f.body.evacuation.stayed, 1);
        assert.deepEqual(f.body.evacuation.sandboxes[0], {
          sandbox_id: "sbx_a",
          outcome: "moved",
          to_node_id: "node-b",
          snapshot_id: "snp_1",
          duration_ms: 12,
        });
        assert.match(f.body.evacuation.sandboxes[1].reason, /no capacity/);
        assert.equal((await s.call("POST", `/admin/api/v1/nodes/${randomUUID()}/drain`, { mode: "forced" }, ADMIN)).status, 404);
      } finally {
        await s.close();
      }
    });

    test("a silent node becomes unavailable and its sandboxes are reported lost", async () => {
      const s = await setup();
      try {
        const id = randomUUID();
        s.answers.set("http://10.9.3.1:3002", id);
        await s.call("POST", "/admin/api/v1/nodes", reg(id, "http://10.9.3.1:3002"));
        const tenant = await createTenant(s.t.db, { name: `t${Date.now()}` });
        const sb = await insertSandbox(s.t.db, {
          tenantId: tenant.id,
          templateId: "base",
          vcpu: 1,
          memoryMib: 256,
          diskMib: 1024,
          nodeId: id as NodeId,
        });
        await transitionSandbox(s.t.db, sb.id, "creating", "running");
        const stopped = await insertSandbox(s.t.db, {
          tenantId: tenant.id,
          templateId: "base",
          vcpu: 1,
          memoryMib: 256,
          diskMib: 1024,
          nodeId: id as NodeId,
        });
        await s.t.db.execute(`UPDATE nodes SET last_heartbeat_at = now() - interval '1 hour' WHERE id = $1`, [id]);
        const liveness = startNodeLiveness({
          db: s.t.db,
          log,
          graceMs: 1000,
          intervalMs: 60_000,
          repo: new StoreSandboxRepo(s.t.db),
        });
        await liveness.tick();
        await liveness.stop();
        const n = (await s.call("GET", `/admin/api/v1/nodes/${id}`, undefined, ADMIN)).body;
        assert.equal(n.status, "unavailable");
        assert.match(n.status_reason, /no heartbeat since/);
        const row = await s.t.db.one<{ state: string; failureMessage: string }>(
          `SELECT state, failure_message AS "failureMessage" FROM sandboxes WHERE id = $1`,
          [sb.id],
        );
        assert.equal(row.state, "failed");
        assert.match(row.failureMessage, /^lost: node .* stopped heartbeating/);
        const still = await s.t.db.one<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [stopped.id]);
        assert.equal(still.state, "creating", "a create in flight is left to its create");
        // It heartbeats again: ready.
        assert.equal(
          (await s.call("POST", `/admin/api/v1/nodes/${id}/heartbeat`, { address: "http://10.9.3.1:3002" })).body.status,
          "ready",
        );
      } finally {
        await s.close();
      }
    });

    test("node_ctl_fence_refuses_and_reconciles: labels outside the allowed prefixes are refused (403, nothing stored); node-ctl registers without them", async () => {
      const s = await setup({ labelPrefixes: ["space.dev/", "fleet"] });
      try {
        const id = randomUUID();
        const address = "http://10.9.4.1:3002";
        s.answers.set(address, id);
        const refused = await s.call("POST", "/admin/api/v1/nodes", reg(id, address, { labels: { fleet: "a", zone: "z1", "kubernetes.io/role": "x" } }));
        assert.equal(refused.status, 403, JSON.stringify(refused.body));
        assert.deepEqual(refused.body.refused_labels, ["kubernetes.io/role", "zone"]);
        assert.match(refused.body.message, /outside the allowed prefixes \(space\.dev\/, fleet\): kubernetes\.io\/role, zone/);
        assert.equal((await s.call("GET", "/admin/api/v1/nodes", undefined, ADMIN)).body.nodes.length, 0, "nothing stored");
        // An operator (admin credential) may set any label.
        const byAdmin = await s.call("POST", "/admin/api/v1/nodes", reg(id, address, { labels: { zone: "z1" } }), ADMIN);
        assert.equal(byAdmin.status, 201, JSON.stringify(byAdmin.body));
        assert.deepEqual(byAdmin.body.labels, { zone: "z1" });

        // node-ctl over HTTP: refused, it drops the fenced labels, registers with the rest,
        // and the stored record converges to what the fence allows.
        const url = await s.app.listen({ host: "127.0.0.1", port: 0 });
        const warnings: string[] = [];
        const logger = createLogger("silent", "test");
        logger.warn = ((o: { refusedLabels?: string[] }, msg: string) => {
          warnings.push(`${msg}: ${(o.refusedLabels ?? []).join(",")}`);
        }) as typeof logger.warn;
        const link = createControlPlaneLink({
          controlUrl: url,
          token: INTERNAL,
          address: () => address,
          nodeGroup: "g1",
          labels: { fleet: "a", "space.dev/pool": "p1", zone: "z2" },
          version: "test",
          logger,
        });
        const inv: NodeInventory = {
          nodeId: id,
          name: `node-${id.slice(0, 4)}`,
          runtime: "runc",
          capacity: { networkSlots: 5, vcpu: 2, memoryMib: 4096, diskMib: 1000 },
          used: { networkSlots: 0, vcpu: 0, memoryMib: 0, diskMib: 0, sandboxes: 0 },
          usableEnvironments: [],
          templates: [],
        };
        await link.registerUntil(async () => inv, Date.now() + 10_000);
        const stored = (await s.call("GET", `/admin/api/v1/nodes/${id}`, undefined, ADMIN)).body;
        assert.deepEqual(stored.labels, { fleet: "a", "space.dev/pool": "p1" });
        assert.deepEqual(warnings, ["the control plane's label fence refused these labels; registering without them: zone"]);
      } finally {
        await s.close();
      }
    });
  });
}
