/**
 * What a standalone node reports over the Admin API (issue 27 items 7, 2), over a fresh
 * database: `reconciled` (the sandboxes it kept at its start: the records it did not keep
 * become failed, a `killing` one killed, a stopped one stays) and `unhealthy` (a running
 * record becomes failed with the watchdog's reason; an unknown sandbox is 404), both
 * announcing `ended`; the node link's calls reach them.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";
import Fastify from "fastify";
import { installErrorHandler } from "../../src/api/error-body.ts";
import { registerNodeAdminRoutes } from "../../src/api/admin/nodes.ts";
import { createLogger } from "../../src/core/log.ts";
import type { NodeId } from "../../src/core/ids.ts";
import { createControlPlaneLink } from "../../src/node/ctl/registration.ts";
import { StoreSandboxRepo } from "../../src/sandboxes/queries.ts";
import type { SandboxEventMap } from "../../src/sandboxes/resources.ts";
import { insertSandbox, transitionSandbox, type SandboxState } from "../../src/store/sandboxes.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { freshDb, testEngines } from "../support/db.ts";

const ADMIN = "admin-token-0123456789";
const INTERNAL = "internal-token-0123456789";
const log = createLogger("silent", "test");

for (const engine of testEngines()) {
  describe(`node reports on ${engine.name}`, { skip: engine.skip }, () => {
    async function setup() {
      const t = await freshDb(engine.name);
      const nodeId = randomUUID();
      const address = "http://10.9.4.1:3002";
      const events = new EventEmitter<SandboxEventMap>();
      const ended: string[] = [];
      events.on("ended", (id) => ended.push(id));
      const app = Fastify();
      installErrorHandler(app);
      registerNodeAdminRoutes(app, {
        db: t.db,
        adminToken: ADMIN,
        internalToken: INTERNAL,
        log,
        verifyNode: async () => ({ nodeId }),
        sandboxes: { repo: new StoreSandboxRepo(t.db), events },
      });
      const url = await app.listen({ host: "127.0.0.1", port: 0 });
      const link = createControlPlaneLink({ controlUrl: url, token: INTERNAL, address: () => address, nodeGroup: "g1", labels: {}, version: "test", logger: log });
      const reg = await app.inject({
        method: "POST",
        url: "/admin/api/v1/nodes",
        headers: { authorization: `Bearer ${INTERNAL}` },
        payload: { id: nodeId, name: "n1", address, verify: true },
      });
      assert.ok(reg.statusCode < 300, reg.body);
      const tenant = await createTenant(t.db, { name: `t${Date.now()}` });
      const sandbox = async (...path: SandboxState[]) => {
        const s = await insertSandbox(t.db, { tenantId: tenant.id, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024, nodeId: nodeId as NodeId });
        let at: SandboxState = "creating";
        for (const to of path) {
          await transitionSandbox(t.db, s.id, at, to);
          at = to;
        }
        return s.id;
      };
      const row = (id: string) =>
        t.db.one<{ state: string; reason: string | null }>(`SELECT state, failure_message AS reason FROM sandboxes WHERE id = $1`, [id]);
      return {
        app,
        link,
        nodeId,
        ended,
        sandbox,
        row,
        async close() {
          await app.close();
          await t.drop();
        },
      };
    }

    test("reconciled: the records the restarted node did not keep become failed; killing ones killed; stopped ones stay", async () => {
      const s = await setup();
      try {
        const kept = await s.sandbox("running");
        const gone = await s.sandbox("running");
        const creating = await s.sandbox();
        const killing = await s.sandbox("running", "killing");
        const stopped = await s.sandbox("running", "stopping", "stopped");
        await s.link.reconciled(s.nodeId, new Set([kept]));
        assert.equal((await s.row(kept)).state, "running");
        for (const id of [gone, creating]) {
          const r = await s.row(id);
          assert.equal(r.state, "failed");
          assert.match(String(r.reason), /^lost: node .* restarted without this sandbox/);
        }
        assert.equal((await s.row(killing)).state, "killed");
        assert.equal((await s.row(stopped)).state, "stopped");
        assert.deepEqual(s.ended.sort(), [gone, creating, killing].sort());
      } finally {
        await s.close();
      }
    });

    test("unhealthy: a running record becomes failed with the reason; unknown is 404 (the node keeps it); bad body 400", async () => {
      const s = await setup();
      try {
        const id = await s.sandbox("running");
        assert.equal(await s.link.unhealthy(s.nodeId, id, "envd did not answer 3 health checks in a row"), true);
        const r = await s.row(id);
        assert.equal(r.state, "failed");
        assert.equal(r.reason, "unhealthy: envd did not answer 3 health checks in a row");
        assert.deepEqual(s.ended, [id]);
        assert.equal(await s.link.unhealthy(s.nodeId, "nosuchsandbox0000000", "x"), false);
        const bad = await s.app.inject({
          method: "POST",
          url: `/admin/api/v1/nodes/${s.nodeId}/sandboxes/${id}/unhealthy`,
          headers: { authorization: `Bearer ${INTERNAL}` },
          payload: {},
        });
        assert.equal(bad.statusCode, 400);
        assert.match(bad.body, /reason/);
        const anon = await s.app.inject({ method: "POST", url: `/admin/api/v1/nodes/${s.nodeId}/sandboxes/${id}/unhealthy`, payload: { reason: "x" } });
        assert.equal(anon.statusCode, 401);
      } finally {
        await s.close();
      }
    });
  });
}
