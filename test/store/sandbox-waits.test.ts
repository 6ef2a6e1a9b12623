// A wait on a sandbox row ends when another connection changes the row (NOTIFY on the
// sandboxes table), not at the next poll: the layer's fallback poll is set far beyond the
// test's own timeout, so only the notification can end the wait in time.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import type { TenantId } from "../../src/core/ids.ts";
import type { Db } from "../../src/store/db.ts";
import { createTenant } from "../../src/store/tenants.ts";
import { insertSandbox, patchSandbox, transitionSandbox } from "../../src/store/sandboxes.ts";
import { FakeSubstrate } from "../../src/substrate/fake-substrate.ts";
import { createSandboxLayer, type SandboxLayer } from "../../src/sandboxes/index.ts";
import { freshDb, testEngines, type TestDb } from "../support/db.ts";

const log = pino({ level: "silent" });
/** Far longer than the test may take: a wait that ends did so on a notification. */
const NEVER_MS = 3_600_000;

for (const engine of testEngines()) {
  describe(`sandbox waits wake on another connection's change: ${engine.name}`, { skip: engine.skip, timeout: 60_000 }, () => {
    let t: TestDb;
    let other: Db;
    let tenant: TenantId;
    let layer: SandboxLayer;
    before(async () => {
      t = await freshDb(engine.name);
      // Postgres: a second pool, as another replica would have; PGlite: the same Db, written past the service.
      other = engine.name === "postgres" ? await t.openAnother() : t.db;
      tenant = (await createTenant(t.db, { name: "acme" })).id;
      const substrate = new FakeSubstrate();
      layer = createSandboxLayer({ db: t.db, log, defaults: { vcpu: 1, memoryMib: 256, diskMib: 1024 }, substrate, pollMs: NEVER_MS });
    });
    after(() => t?.drop());

    it("a wait for a sandbox to leave suspending ends when another connection moves it", { timeout: 20_000 }, async () => {
      const s = await insertSandbox(t.db, { tenantId: tenant, state: "running", vcpu: 1, memoryMib: 256, diskMib: 1024 });
      await transitionSandbox(t.db, s.id, "running", "suspending");
      const waiting = layer.sandboxes.awaitLeaving(tenant, s.id, ["suspending"], NEVER_MS);
      // A change that keeps it suspending wakes the wait too, which reads the row and waits on.
      await patchSandbox(other, s.id, { metadata: { step: "1" } });
      await transitionSandbox(other, s.id, "suspending", "suspended");
      const rec = await waiting;
      assert.equal(rec?.state, "suspended");
    });

    it("a wait started before the first change of a fresh row sees the change", { timeout: 20_000 }, async () => {
      const s = await insertSandbox(t.db, { tenantId: tenant, vcpu: 1, memoryMib: 256, diskMib: 1024 });
      const waiting = layer.sandboxes.awaitLeaving(tenant, s.id, ["creating"], NEVER_MS);
      await transitionSandbox(other, s.id, "creating", "failed", { failureMessage: "boom" });
      assert.equal((await waiting)?.state, "failed");
    });
  });
}
