import { test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { StoreApiKeys } from "../api/auth.ts";
import { freshDb } from "../../test/support/db.ts";
import { createTenant } from "../store/tenants.ts";
import { createApiKey } from "../store/api-keys.ts";
import { registerNode } from "../store/nodes.ts";
import { listExecutions } from "../store/executions.ts";
import { getSandbox } from "../store/sandboxes.ts";
import { FakeSubstrate } from "../substrate/fake-substrate.ts";
import { createSandboxLayer } from "./index.ts";
import { StoreNodeDirectory, StoreTemplates } from "./queries.ts";
import { startTimeoutEnforcer } from "../controller/timeouts.ts";
import type { CreateInput } from "./service.ts";
import type { NodeId } from "../core/ids.ts";

const input = (o: Partial<CreateInput> = {}): CreateInput => ({
  template: "base", metadata: {}, envVars: {}, timeoutSec: 300, secure: true, allowInternetAccess: true,
  network: null, onTimeout: "kill", autoResume: false, resources: {}, ...o,
});
const log = pino({ level: "silent" });

async function setup() {
  const t = await freshDb("pglite");
  const tenant = await createTenant(t.db, { name: "a" });
  const other = await createTenant(t.db, { name: "b" });
  await registerNode(t.db, {
    id: "00000000-0000-4000-8000-000000000001" as NodeId, name: "n1", address: "http://127.0.0.1:3002",
    capacity: { networkSlots: 10, memoryMib: 8192, vcpu: 4, diskMib: 100000 }, templates: [{ templateId: "base", rootfsSizeMib: 451, environment: "e" }],
  });
  const substrate = new FakeSubstrate();
  const layer = createSandboxLayer({ db: t.db, log, defaults: { vcpu: 1, memoryMib: 256, diskMib: 1024 }, substrate });
  return { ...t, tenant, other, ...layer, substrate };
}

test("store-backed: create, get, tenant scoping, kill, api key lookup, templates from node inventory", async () => {
  const s = await setup();
  try {
    const { plaintext } = await createApiKey(s.db, { tenantId: s.tenant.id });
    assert.equal(await new StoreApiKeys(s.db).tenantForApiKey(plaintext), s.tenant.id);
    assert.equal(await new StoreApiKeys(s.db).tenantForApiKey("e2b_nope"), null);
    const tpl = await new StoreTemplates(s.db).resolve(s.tenant.id, "base");
    assert.deepEqual(tpl, { templateId: "base", alias: null, rootfsSizeMib: 451 });
    await assert.rejects(s.sandboxes.create(s.tenant.id, input({ resources: { diskMib: 300 } }), AbortSignal.timeout(5000)), /disk_mib=300 .*451 MiB/);
    const sb = await s.sandboxes.create(s.tenant.id, input({ metadata: { k: "v" } }), AbortSignal.timeout(5000));
    assert.equal(sb.state, "running");
    assert.equal((await s.sandboxes.get(s.tenant.id, sb.id)).metadata.k, "v");
    await assert.rejects(s.sandboxes.get(s.other.id, sb.id), /not found/);
    const execs = await listExecutions(s.db, sb.id);
    assert.deepEqual(execs.map((e) => e.state), ["running"]);
    await s.sandboxes.kill(s.tenant.id, sb.id);
    await assert.rejects(s.sandboxes.kill(s.tenant.id, sb.id), /not found/);
    const row = await getSandbox(s.db, sb.id);
    assert.equal(row.state, "killed");
    const nodes = await new StoreNodeDirectory(s.db).list();
    assert.equal(nodes[0]!.capacity!.networkSlots, 10);
    assert.deepEqual(nodes[0]!.templates, ["base"]);
  } finally {
    await s.drop();
  }
});

test("store-backed: list pages never skip or repeat", async () => {
  const s = await setup();
  try {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await s.sandboxes.create(s.tenant.id, input({ metadata: { i: String(i % 2) } }), AbortSignal.timeout(5000))).id);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const p = await s.sandboxes.list(s.tenant.id, { states: ["running"], metadata: {}, order: "desc", limit: 2, ...(cursor ? { cursor } : {}) });
      seen.push(...p.items.map((r) => r.id));
      cursor = p.cursor ?? undefined;
      if (seen.length === 2) await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
    } while (cursor);
    assert.deepEqual(seen, [...ids].reverse());
    const odd = await s.sandboxes.list(s.tenant.id, { states: ["running"], metadata: { i: "1" }, order: "asc", limit: 100 });
    assert.deepEqual(odd.items.map((r) => r.id), [ids[1], ids[3]]);
  } finally {
    await s.drop();
  }
});

test("timeout enforcer kills within about a second of end_at", async () => {
  const s = await setup();
  const enforcer = startTimeoutEnforcer({ sandboxes: s.sandboxes, log });
  try {
    const sb = await s.sandboxes.create(s.tenant.id, input({ timeoutSec: 1 }), AbortSignal.timeout(5000));
    const keep = await s.sandboxes.create(s.tenant.id, input({ timeoutSec: 60 }), AbortSignal.timeout(5000));
    const deadline = sb.endAt!.getTime() + 1000;
    for (;;) {
      const row = await getSandbox(s.db, sb.id);
      if (row.state === "killed") break;
      assert.ok(Date.now() < deadline, `still ${row.state} 1 s after end_at`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(s.substrate.calls.includes(`kill ${sb.id}`));
    assert.equal((await s.sandboxes.get(s.tenant.id, keep.id)).state, "running");
  } finally {
    await enforcer.stop();
    await s.drop();
  }
});
