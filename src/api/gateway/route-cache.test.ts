import { test } from "node:test";
import assert from "node:assert/strict";
import type { SandboxRecord } from "../../sandboxes/model.ts";
import { RouteCache } from "./route-cache.ts";
import { SecureSandboxes } from "./secure-sandboxes.ts";

const ID = "abcdefghij0123456789";
type RecInit = Omit<Partial<SandboxRecord>, "nodeId"> & { nodeId?: string | null };
const rec = (o: RecInit): SandboxRecord => ({ id: ID, state: "running", nodeId: "n1", envdAccessToken: null, ...o }) as SandboxRecord;

test("a miss is never cached: the next lookup sees the sandbox running", async () => {
  let row: SandboxRecord | null = rec({ state: "suspended", nodeId: null });
  let reads = 0;
  const cache = new RouteCache({ getById: async () => (reads++, row) }, 60_000);
  assert.equal((await cache.lookup(ID))?.state, "suspended");
  row = rec({});
  assert.equal((await cache.lookup(ID))?.state, "running");
  assert.equal((await cache.lookup(ID))?.state, "running");
  assert.equal(reads, 2, "the running record is cached, the miss was not");
  assert.equal(await cache.lookup("not-an-id"), null);
});

test("a published record wins over a read that was in flight when it came", async () => {
  let release: (r: SandboxRecord) => void = () => {};
  const cache = new RouteCache({ getById: () => new Promise((r) => (release = r)) }, 60_000);
  const stale = cache.lookup(ID);
  cache.publish(rec({ nodeId: "n2" }));
  release(rec({ state: "resuming", nodeId: null }));
  assert.equal((await stale)?.state, "resuming", "the early caller gets what it read");
  assert.equal((await cache.lookup(ID))?.nodeId, "n2");
  cache.forget(ID);
  const again = cache.lookup(ID);
  release(rec({ nodeId: "n3" }));
  assert.equal((await again)?.nodeId, "n3");
});

test("secure sandboxes: a miss waits for a fresh list; misses share reads", async () => {
  let rows: SandboxRecord[] = [rec({ envdAccessToken: "a" })];
  let reads = 0;
  const secure = new SecureSandboxes({ listRunningSecure: async () => (reads++, rows) }, 60_000);
  assert.equal((await secure.find((r) => r.envdAccessToken === "a"))?.id, ID);
  const b = { ...rec({ envdAccessToken: "b" }), id: "bbbbbbbbbb0123456789" } as SandboxRecord;
  rows = [...rows, b];
  assert.equal((await secure.find((r) => r.envdAccessToken === "b"))?.id, b.id, "created after the cached list: found");
  assert.equal((await secure.find((r) => r.envdAccessToken === "a"))?.id, ID);
  assert.equal(reads, 2, "hits come from the list");
  reads = 0;
  const misses = await Promise.all(Array.from({ length: 50 }, () => secure.find((r) => r.envdAccessToken === "nope")));
  assert.deepEqual(new Set(misses), new Set([null]));
  assert.ok(reads <= 2, `50 concurrent misses made ${reads} reads`);
  secure.forget(ID);
  secure.publish({ ...rec({ envdAccessToken: "c" }), id: "cccccccccc0123456789" } as SandboxRecord);
  rows = [];
  assert.equal((await secure.find((r) => r.envdAccessToken === "c"))?.id, "cccccccccc0123456789", "published: listed at once");
});
