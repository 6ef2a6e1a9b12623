/**
 * `space rotate-key` (src/cli/rotate-key.ts): every wrapped data key — snapshots in the
 * database, parent and template records in the blob store, nested ones too — moves from
 * the previous cluster key to the new one, each still unwrapping to the same data key;
 * keys already under the new key and keys under neither are left alone (the latter named);
 * a second run changes nothing; nodes unwrap with either key meanwhile.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { text } from "node:stream/consumers";
import { FsBlobStore } from "../../src/blob/fs/fs-blob-store.ts";
import { rotateKeys } from "../../src/cli/rotate-key.ts";
import { newDataKey, unwrapKey, wrapKey } from "../../src/core/envelope.ts";
import { SpaceError } from "../../src/core/errors.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { insertSandbox } from "../../src/store/sandboxes.ts";
import { createSnapshot, updateSnapshot } from "../../src/store/snapshots.ts";
import { freshDb, type TestDb } from "../support/db.ts";

describe("space rotate-key: re-wraps data keys from SPACE_ENCRYPTION_KEY_PREVIOUS to SPACE_ENCRYPTION_KEY", () => {
  let t: TestDb;
  let dir: string;
  let blob: FsBlobStore;
  const oldKey = newDataKey();
  const newKey = newDataKey();
  const strayKey = newDataKey();
  const dk = { a: newDataKey(), b: newDataKey(), c: newDataKey(), parent: newDataKey(), stream: newDataKey(), capture: newDataKey() };
  const ids: Record<string, string> = {};
  const json = async (key: string) => JSON.parse(await text(await blob.get(key))) as Record<string, unknown>;

  before(async () => {
    t = await freshDb("pglite");
    dir = await mkdtemp(join(tmpdir(), "space-rotate-"));
    blob = new FsBlobStore(dir);
    const tenant = (await createTenant(t.db, { name: "rot" })).id;
    for (const [name, key, data] of [["a", oldKey, dk.a], ["b", newKey, dk.b], ["c", strayKey, dk.c]] as const) {
      const s = await insertSandbox(t.db, { tenantId: tenant, vcpu: 1, memoryMib: 256, diskMib: 1024 });
      const sn = await createSnapshot(t.db, { sandboxId: s.id });
      await updateSnapshot(t.db, sn.id, { wrappedKey: wrapKey(key, data) });
      ids[name] = sn.id;
    }
    await blob.put("parents/u1.json", Buffer.from(JSON.stringify({ key: "parents/u1.btrfs.enc", sizeBytes: 1, sha256: "00", wrappedKey: wrapKey(oldKey, dk.parent) })));
    await blob.put("templates/streams/h1.btrfs.enc.json", Buffer.from(JSON.stringify({ key: "templates/streams/h1.btrfs.enc", wrappedKey: wrapKey(oldKey, dk.stream) })));
    // A build manifest: the stream's key, and its capture descriptor's, nested.
    await blob.put(
      "templates/builds/t1.json",
      Buffer.from(JSON.stringify({ name: "t1", stream: { key: "templates/streams/h1.btrfs.enc", wrappedKey: wrapKey(oldKey, dk.stream) }, info: { capture: { snapshotId: "x", wrappedKey: wrapKey(oldKey, dk.capture) } } })),
    );
    await blob.put("templates/builds/plain.json", Buffer.from(JSON.stringify({ name: "plain", stream: { key: "templates/streams/p.btrfs" } })));
  });
  after(async () => {
    await blob?.close();
    await t?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it("nodes unwrap a not-yet-rotated key only with the previous key beside the new one", () => {
    const w = wrapKey(oldKey, dk.a);
    assert.throws(() => unwrapKey(newKey, w), (e: unknown) => e instanceof SpaceError && e.code === "failed_precondition");
    assert.ok(unwrapKey(newKey, w, oldKey).equals(dk.a));
  });

  it("re-wraps the database's and the blob store's keys to the same data keys; names the stray one; leaves the rest", async () => {
    const plainBefore = await blob.head("templates/builds/plain.json");
    const r = await rotateKeys({ db: t.db, blob, from: oldKey, to: newKey });
    // a, parent, the stream record, the manifest's stream copy and its capture.
    assert.equal(r.rewrapped, 5);
    assert.equal(r.current, 1);
    assert.deepEqual(r.unknown, [`snapshot ${ids.c}`]);
    assert.deepEqual(r.raced, []);

    const under = (w: unknown) => unwrapKey(newKey, String(w));
    const wrappedOf = async (id: string) => (await t.db.one<{ w: string }>(`SELECT wrapped_key AS w FROM snapshots WHERE id = $1`, [id])).w;
    assert.ok(under(await wrappedOf(ids.a!)).equals(dk.a));
    assert.ok(under((await json("parents/u1.json")).wrappedKey).equals(dk.parent));
    assert.ok(under((await json("templates/streams/h1.btrfs.enc.json")).wrappedKey).equals(dk.stream));
    const m = (await json("templates/builds/t1.json")) as { stream: { wrappedKey: string }; info: { capture: { wrappedKey: string; snapshotId: string } } };
    assert.ok(under(m.stream.wrappedKey).equals(dk.stream));
    assert.ok(under(m.info.capture.wrappedKey).equals(dk.capture));
    assert.equal(m.info.capture.snapshotId, "x", "the rest of the record is kept");
    // The stray key is untouched (still under its own key); a record without keys is not rewritten.
    assert.ok(unwrapKey(strayKey, await wrappedOf(ids.c!)).equals(dk.c));
    assert.deepEqual(await blob.head("templates/builds/plain.json"), plainBefore);
  });

  it("a second run re-wraps nothing (idempotent); the same key twice is refused naming both variables", async () => {
    const r = await rotateKeys({ db: t.db, blob, from: oldKey, to: newKey });
    assert.equal(r.rewrapped, 0);
    assert.equal(r.current, 6);
    await assert.rejects(rotateKeys({ db: t.db, blob, from: newKey, to: newKey }), (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && /SPACE_ENCRYPTION_KEY_PREVIOUS/.test(e.message));
  });
});
