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
import { latestRestorableSnapshot, type Snapshot } from "../store/snapshots.ts";
import { SpaceError } from "../core/errors.ts";
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

/** The sandbox's newest restorable suspend snapshot, once `pred` holds for it (publication runs behind the pause). */
async function snapshotWhen(db: Parameters<typeof latestRestorableSnapshot>[0], sandboxId: string, pred: (s: Snapshot | undefined) => boolean): Promise<Snapshot | undefined> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const s = await latestRestorableSnapshot(db, sandboxId, "suspend");
    if (pred(s) || Date.now() > deadline) return s;
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("pause answers once the capture is on the node (local), the parts are published behind it (durable)", async () => {
  const s = await setup();
  try {
    let open!: () => void;
    s.substrate.publishGate = new Promise<void>((r) => (open = r));
    const sb = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
    const paused = await s.sandboxes.suspend(s.tenant.id, sb.id);
    assert.equal(paused.state, "suspended");
    const local = await latestRestorableSnapshot(s.db, sb.id, "suspend");
    assert.equal(local?.state, "local");
    assert.deepEqual(local?.parts, []);
    assert.ok(s.substrate.calls.includes(`publish ${local!.id}`), "the publication started behind the answer");
    open();
    const durable = await snapshotWhen(s.db, sb.id, (x) => x?.state === "durable");
    assert.equal(durable?.state, "durable");
    assert.equal(durable?.id, local!.id);
    assert.ok(durable!.parts.some((p) => p.kind === "memory") && durable!.parts.some((p) => p.kind === "disk"));
    assert.ok(durable!.durableAt instanceof Date);
    // Restorable anywhere now: the placement is not pinned.
    await s.sandboxes.connect(s.tenant.id, sb.id, 60);
    assert.equal(s.substrate.placements.at(-1)?.pinnedNodeId, undefined);
  } finally {
    await s.drop();
  }
});

test("connect right after a pause: pinned to the snapshot's node; when that cannot run it, waits for durable and restores elsewhere", async () => {
  const s = await setup();
  try {
    let open!: () => void;
    s.substrate.publishGate = new Promise<void>((r) => (open = r));
    const sb = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
    await s.sandboxes.suspend(s.tenant.id, sb.id);
    const snap = (await latestRestorableSnapshot(s.db, sb.id, "suspend"))!;
    s.substrate.nextRestoreError = new SpaceError("resource_exhausted", "node n1 is full");
    const connecting = s.sandboxes.connect(s.tenant.id, sb.id, 60);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await getSandbox(s.db, sb.id)).state, "resuming", "the connect waits for the publication");
    open();
    const { sandbox, resumed } = await connecting;
    assert.equal(resumed, true);
    assert.equal(sandbox.state, "running");
    const [pinned, free] = s.substrate.placements.slice(-2);
    assert.equal(pinned?.pinnedNodeId, snap.nodeId, "first: pinned to the node holding the local copy");
    assert.equal(free?.pinnedNodeId, undefined, "then: anywhere, the snapshot being durable");
    assert.equal((await latestRestorableSnapshot(s.db, sb.id, "suspend"))?.state, "durable");
  } finally {
    await s.drop();
  }
});

test("a node lost between pause and durable: the sandbox stays paused, the connect is refused naming the local snapshot; it resumes once the node is back", async () => {
  const s = await setup();
  try {
    s.substrate.failNextPublish = new SpaceError("unavailable", "node n1 is unreachable");
    const sb = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
    await s.sandboxes.suspend(s.tenant.id, sb.id);
    const snap = (await latestRestorableSnapshot(s.db, sb.id, "suspend"))!;
    // The publication failed: the row stays local (its parts never reached the blob store).
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await latestRestorableSnapshot(s.db, sb.id, "suspend"))?.state, "local");
    // Still lost at the connect: the restore there fails, and so does the publication the
    // connect asks it for (the node is unreachable for every call).
    s.substrate.nextRestoreError = new SpaceError("unavailable", "node n1 is unreachable");
    s.substrate.failNextPublish = new SpaceError("unavailable", "node n1 is unreachable");
    const publishes = s.substrate.calls.filter((c) => c.startsWith("publish")).length;
    const before = s.substrate.calls.filter((c) => c.startsWith("restore")).length;
    await assert.rejects(s.sandboxes.connect(s.tenant.id, sb.id, 60), (e: unknown) => {
      assert.ok(e instanceof SpaceError);
      assert.equal(e.code, "unavailable");
      assert.match(e.message, new RegExp(`snapshot ${snap.id} is local to node`));
      assert.deepEqual([e.details?.["durability"], e.details?.["snapshotId"]], ["local", snap.id]);
      return true;
    });
    // Only the pinned node was tried: nothing was restored from anywhere else.
    assert.equal(s.substrate.calls.filter((c) => c.startsWith("restore")).length, before + 1);
    assert.equal(s.substrate.calls.filter((c) => c.startsWith("publish")).length, publishes + 1, "the connect asked the node to publish, once");
    assert.ok(s.substrate.placements.slice(-1).every((p) => p.pinnedNodeId === snap.nodeId));
    assert.equal((await getSandbox(s.db, sb.id)).state, "suspended");
    // The node is back: the connect restores from its local copy.
    const { sandbox } = await s.sandboxes.connect(s.tenant.id, sb.id, 60);
    assert.equal(sandbox.state, "running");
    assert.ok(s.substrate.calls.at(-1)?.startsWith(`restore ${sb.id} ${snap.id}`));
  } finally {
    await s.drop();
  }
});

test("fork: the capture stays on its node (no upload) and forks restore there; a fork that node cannot take has it published once and restores anywhere", async () => {
  const s = await setup();
  try {
    const sb = await s.sandboxes.create(s.tenant.id, input(), AbortSignal.timeout(5000));
    const one = await s.sandboxes.fork(s.tenant.id, sb.id, { count: 2 });
    assert.ok(one.every((o) => o.sandbox?.state === "running"), JSON.stringify(one.map((o) => o.error?.message)));
    // The capture names the forks: their node makes their disks and slots beside the dump.
    assert.equal(s.substrate.calls.find((c) => c.startsWith(`capture ${sb.id}`)), `capture ${sb.id} as ${one.map((o) => o.sandbox!.id).join(" ")}`);
    assert.equal(s.substrate.calls.filter((c) => c.startsWith("publish")).length, 0, "no upload before (or for) forks its node takes");
    assert.ok(s.substrate.placements.slice(-2).every((p) => p.pinnedNodeId === sb.nodeId), "pinned to the capture's node");
    s.substrate.nextRestoreError = new SpaceError("resource_exhausted", "node n1 is full");
    const two = await s.sandboxes.fork(s.tenant.id, sb.id, { count: 1 });
    assert.equal(two[0]?.sandbox?.state, "running", two[0]?.error?.message);
    assert.equal(s.substrate.calls.filter((c) => c.startsWith("publish")).length, 1, "published once, for the fork its node could not take");
    assert.equal(s.substrate.placements.at(-1)?.pinnedNodeId, undefined, "then placed anywhere");
  } finally {
    await s.drop();
  }
});
