// The Db layer's engine selection, on-disk PGlite persistence and connection errors.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SpaceError } from "../../src/core/errors.ts";
import { openDb, redactUrl } from "../../src/store/db.ts";
import { migrate } from "../../src/store/migrate.ts";
import { ensureTenant, findTenantByName } from "../../src/store/tenants.ts";

describe("openDb", () => {
  it("PGlite in a data directory keeps data across reopen", { timeout: 60_000 }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "space-pglite-"));
    try {
      const a = await openDb("", join(dir, "db"));
      assert.equal(a.engine, "pglite");
      await migrate(a);
      const t = await ensureTenant(a, { name: "default" });
      await a.close();
      const b = await openDb(`pglite:${join(dir, "db")}`);
      assert.deepEqual((await migrate(b)).applied, []);
      assert.equal((await findTenantByName(b, "default"))?.id, t.id);
      await b.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses unknown URLs and reports an unreachable Postgres as unavailable (password redacted)", async () => {
    await assert.rejects(openDb("mysql://x"), (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument");
    await assert.rejects(openDb(""), (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument");
    await assert.rejects(openDb("postgres://u:secret@127.0.0.1:1/db"), (e: unknown) => {
      assert.ok(e instanceof SpaceError);
      assert.equal(e.code, "unavailable");
      assert.ok(!e.message.includes("secret"), e.message);
      return true;
    });
    assert.equal(redactUrl("postgres://u:pw@h/db"), "postgres://u:***@h/db");
  });
});
