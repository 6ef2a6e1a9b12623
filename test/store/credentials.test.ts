/**
 * The credential cache of src/api/auth.ts over a real store: concurrent requests with one
 * key pay one lookup; a key revoked and forgotten while a lookup is in flight is not
 * remembered from that lookup.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { forgetCredentials, tenantOfApiKey } from "../../src/api/auth.ts";
import type { Db, Queryable } from "../../src/store/db.ts";
import { createApiKey, revokeApiKey } from "../../src/store/api-keys.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { freshDb } from "../support/db.ts";

/** `db` with its reads counted; `hold` keeps each read's answer back until `release`. */
function counted(db: Db) {
  let reads = 0;
  let open: () => void = () => undefined;
  let gate: Promise<void> = Promise.resolve();
  const q: Queryable = {
    ...db,
    maybeOne: async (sql, params) => {
      reads++;
      const row = await db.maybeOne(sql, params);
      await gate;
      return row;
    },
  } as Queryable;
  return {
    q,
    reads: () => reads,
    hold: () => {
      gate = new Promise((r) => (open = r));
    },
    release: () => open(),
  };
}

describe("credential cache", () => {
  test("a burst of requests with one API key pays one lookup", async () => {
    const t = await freshDb("pglite");
    try {
      const tenant = await createTenant(t.db, { name: "burst" });
      const { plaintext } = await createApiKey(t.db, { tenantId: tenant.id });
      const c = counted(t.db);
      c.hold();
      const all = Array.from({ length: 20 }, () => tenantOfApiKey(c.q, plaintext));
      c.release();
      assert.deepEqual(new Set(await Promise.all(all)), new Set([tenant.id]));
      assert.equal(c.reads(), 1);
      assert.equal(await tenantOfApiKey(c.q, plaintext), tenant.id);
      assert.equal(c.reads(), 1, "then remembered");
    } finally {
      await t.drop();
    }
  });

  test("forgotten while its lookup is in flight: that lookup answers but is not remembered", async () => {
    const t = await freshDb("pglite");
    try {
      const tenant = await createTenant(t.db, { name: "revoked" });
      const { plaintext, apiKey } = await createApiKey(t.db, { tenantId: tenant.id });
      const c = counted(t.db);
      c.hold();
      const inflight = tenantOfApiKey(c.q, plaintext);
      await revokeApiKey(t.db, tenant.id, apiKey.id);
      forgetCredentials(c.q);
      c.release();
      await inflight;
      assert.equal(await tenantOfApiKey(c.q, plaintext), null, "the revoked key is refused at the next request");
      assert.equal(c.reads(), 2);
    } finally {
      await t.drop();
    }
  });
});
