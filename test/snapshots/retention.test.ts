/**
 * The snapshot retention sweeper on the real store (PGlite, and Postgres when
 * SPACE_TEST_DATABASE_URL is set) with a filesystem blob store and the fake substrate:
 * orphaned_restore_gc_reaps_only_superseded, retention_restore_source_guard and
 * retention_claim_finish_forward. Suspend/restore go through the SandboxService, as the
 * APIs do; the sweeper runs with minimum age 0 (the test hook).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { pino } from "pino";
import { FsBlobStore } from "../../src/blob/open.ts";
import type { BlobStore } from "../../src/blob/blob-store.ts";
import type { NodeId, TenantId } from "../../src/core/ids.ts";
import { createSandboxLayer, type SandboxLayer } from "../../src/sandboxes/index.ts";
import type { CreateInput } from "../../src/sandboxes/service.ts";
import { sweepSnapshots } from "../../src/controller/snapshot-retention.ts";
import { registerNode } from "../../src/store/nodes.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { FakeSubstrate } from "../../src/substrate/fake-substrate.ts";
import { freshDb, testEngines, type TestDb } from "../support/db.ts";

const log = pino({ level: "silent" });
const input: CreateInput = {
  template: "base", metadata: {}, envVars: {}, timeoutSec: 300, secure: true, allowInternetAccess: true,
  network: null, onTimeout: "kill", autoResume: false, resources: {},
};

for (const engine of testEngines()) {
  describe(`snapshot retention on ${engine.name}`, { skip: engine.skip }, () => {
    let t: TestDb;
    let blobDir: string;
    let blobs: BlobStore;
    let layer: SandboxLayer;
    let substrate: FakeSubstrate;
    let tenant: TenantId;

    const sweep = (o: { blobs?: BlobStore; minAgeMs?: number } = {}) =>
      sweepSnapshots({ db: t.db, blobs: o.blobs ?? blobs, substrate, log, minAgeMs: o.minAgeMs ?? 0 });
    const state = async (id: string) => (await t.db.one<{ state: string }>(`SELECT state FROM snapshots WHERE id = $1`, [id])).state;
    /** The fake node describes parts without writing them: put bytes there, as a real upload would. */
    const publish = async (snapshotId: string) => {
      for (const kind of ["disk.btrfs", "memory.tar"]) await blobs.put(`snapshots/${snapshotId}/${kind}`, Buffer.from(`${snapshotId} ${kind}`));
    };
    const stored = async (snapshotId: string) => (await blobs.list(`snapshots/${snapshotId}/`)).length;
    const suspendOnce = async (id: string) => {
      await layer.sandboxes.suspend(tenant, id);
      const snap = (await layer.sandboxes.snapshots.latest(id, "suspend"))!;
      await publish(snap.id);
      return snap.id;
    };

    before(async () => {
      t = await freshDb(engine.name);
      blobDir = await mkdtemp(join(tmpdir(), "space-retention-"));
      blobs = new FsBlobStore(blobDir);
      tenant = (await createTenant(t.db, { name: "retention" })).id;
      await registerNode(t.db, {
        id: "00000000-0000-4000-8000-000000000001" as NodeId, name: "n1", address: "http://127.0.0.1:3002",
        capacity: { networkSlots: 10, memoryMib: 8192, vcpu: 4, diskMib: 100000 }, templates: [{ templateId: "base", rootfsSizeMib: 451, environment: "e" }],
      });
      substrate = new FakeSubstrate();
      layer = createSandboxLayer({ db: t.db, log, defaults: { vcpu: 1, memoryMib: 256, diskMib: 1024 }, substrate });
    });
    after(async () => {
      await t?.drop();
      if (blobDir) await rm(blobDir, { recursive: true, force: true });
    });

    it("orphaned_restore_gc_reaps_only_superseded: the superseded suspend snapshot goes (blobs, node copy); the one the next restore needs and named ones stay", async () => {
      const sb = await layer.sandboxes.create(tenant, input, AbortSignal.timeout(5000));
      const named = await layer.sandboxes.createNamedSnapshot(tenant, sb.id, "keep-me");
      await publish(named.id);
      const s1 = await suspendOnce(sb.id);
      await layer.sandboxes.connect(tenant, sb.id, 300);
      const s2 = await suspendOnce(sb.id);
      // The suspend marked s1 deleted already (best effort); as if that had failed, it is live again.
      await t.db.execute(`UPDATE snapshots SET state = 'durable', deleted_at = NULL WHERE id = $1`, [s1]);

      const r = await sweep();
      assert.deepEqual(r.expired, [s1], "only the superseded one expires");
      assert.ok(r.reaped.includes(s1), JSON.stringify(r));
      assert.equal(await state(s1), "reaped");
      assert.equal(await stored(s1), 0, "its blobs are deleted");
      assert.ok(substrate.calls.includes(`drop ${s1}`), "its node copy is freed");
      assert.equal(await state(s2), "durable", "the snapshot the next restore needs stays");
      assert.equal(await stored(s2), 2);
      assert.equal(await state(named.id), "durable", "named snapshots live until deleted");
      assert.equal(await stored(named.id), 2);
      const back = await layer.sandboxes.connect(tenant, sb.id, 300);
      assert.equal(back.resumed, true);
      assert.ok(substrate.calls.includes(`restore ${sb.id} ${s2}`));
      // Killed: its suspend snapshots are no restore's any more; the named one outlives it.
      await layer.sandboxes.kill(tenant, sb.id);
      await sweep();
      assert.equal(await state(s2), "reaped");
      assert.equal(await stored(s2), 0);
      assert.equal(await state(named.id), "durable");
    });

    it("retention_restore_source_guard: a snapshot a restore is using is not deleted until the restore is done", async () => {
      const sb = await layer.sandboxes.create(tenant, input, AbortSignal.timeout(5000));
      const s = await suspendOnce(sb.id);
      substrate.restoreDelayMs = 400;
      try {
        const restoring = layer.sandboxes.connect(tenant, sb.id, 300);
        await new Promise((r) => setTimeout(r, 150)); // the restore holds s and is on the node now
        // Meanwhile something marks it deleted (e.g. an operator, or a supersede).
        await t.db.execute(`UPDATE snapshots SET state = 'deleted', deleted_at = now() - interval '1 hour' WHERE id = $1`, [s]);
        const during = await sweep();
        assert.ok(!during.reaped.includes(s), JSON.stringify(during));
        assert.equal(await state(s), "deleted", "held: not claimed");
        assert.equal(await stored(s), 2, "its blobs are all there for the restore");
        assert.equal((await restoring).resumed, true);
      } finally {
        substrate.restoreDelayMs = 0;
      }
      const done = await sweep();
      assert.ok(done.reaped.includes(s), "released: now it goes");
      assert.equal(await stored(s), 0);
      // A claimed snapshot refuses new holds; a holder that crashed (deadline passed) does not block retention forever.
      assert.equal(await layer.sandboxes.snapshots.hold(s, new Date(Date.now() + 60_000)), false);
      const s2 = await suspendOnce(sb.id);
      assert.equal(await layer.sandboxes.snapshots.hold(s2, new Date(Date.now() - 1000)), true);
      // Deleted a moment ago: the sweep takes what is older than its minimum age (0 here), strictly.
      await t.db.execute(`UPDATE snapshots SET state = 'deleted', deleted_at = now() - interval '1 second' WHERE id = $1`, [s2]);
      assert.ok((await sweep()).reaped.includes(s2), "a lapsed hold does not protect");
    });

    it("retention_claim_finish_forward: a claim whose deletion fails stays reaping (never restorable again) and the next sweep finishes it", async () => {
      const sb = await layer.sandboxes.create(tenant, input, AbortSignal.timeout(5000));
      const s1 = await suspendOnce(sb.id);
      await layer.sandboxes.connect(tenant, sb.id, 300);
      await suspendOnce(sb.id); // supersedes s1
      let failures = 1;
      const flaky: BlobStore = Object.assign(Object.create(blobs) as BlobStore, {
        delete: async (key: string, signal?: AbortSignal) => {
          if (key.startsWith(`snapshots/${s1}/`) && failures-- > 0) throw new Error("blob store unavailable");
          return blobs.delete(key, signal);
        },
      });
      const first = await sweep({ blobs: flaky });
      assert.deepEqual(first.failed.map((f) => f.id), [s1], JSON.stringify(first));
      assert.equal(await state(s1), "reaping", "claimed, not finished, not rolled back");
      assert.equal(await layer.sandboxes.snapshots.hold(s1, new Date(Date.now() + 60_000)), false, "no restore may use it now");
      assert.notEqual((await layer.sandboxes.snapshots.latest(sb.id, "suspend"))?.id, s1);
      // Finished forward whatever its age (the minimum age gates claims, not finishing).
      const second = await sweep({ minAgeMs: 3_600_000 });
      assert.deepEqual(second.reaped, [s1]);
      assert.equal(await state(s1), "reaped");
      assert.equal(await stored(s1), 0);
    });
  });
}
