import { test } from "node:test";
import assert from "node:assert/strict";
import Fastify from "fastify";
import { pino } from "pino";
import { registerEcwRoutes } from "./ecw-routes.ts";
import { SandboxService } from "../../sandboxes/service.ts";
import { MemoryApiKeys, MemorySandboxRepo, MemoryTemplates } from "../../sandboxes/memory-repo.ts";
import { FakeSubstrate } from "../../substrate/fake-substrate.ts";
import { SpaceError } from "../../core/errors.ts";
import type { TenantId } from "../../core/ids.ts";
import { decodeMetadataFilter } from "./list-filters.ts";

async function setup() {
  const log = pino({ level: "silent" });
  const repo = new MemorySandboxRepo();
  const substrate = new FakeSubstrate();
  const templates = new MemoryTemplates([
    { templateId: "base", alias: "base", rootfsSizeMib: 451 },
    { templateId: "tpl123", alias: "py", rootfsSizeMib: null },
  ]);
  const keys = new MemoryApiKeys();
  keys.add("key-a", "tn_a" as TenantId);
  keys.add("key-b", "tn_b" as TenantId);
  const sandboxes = new SandboxService({ repo, templates, substrate, defaults: { vcpu: 2, memoryMib: 1024, diskMib: 2048 }, log });
  const app = Fastify();
  await registerEcwRoutes(app, { sandboxes, apiKeys: keys, sandboxDomain: null, log });
  const call = (method: string, url: string, body?: unknown, key = "key-a") =>
    app.inject({ method: method as "GET", url, headers: { "x-api-key": key, ...(body !== undefined ? { "content-type": "application/json" } : {}) }, ...(body !== undefined ? { payload: JSON.stringify(body) } : {}) });
  return { app, repo, substrate, sandboxes, call };
}

test("create v2 returns a Sandbox with tokens; get returns SandboxDetail", async () => {
  const { call } = await setup();
  const r = await call("POST", "/v2/sandboxes", { templateID: "base", metadata: { k: "v w" }, timeout: 120 });
  assert.equal(r.statusCode, 201, r.body);
  const sb = r.json();
  assert.match(sb.sandboxID, /^[a-z0-9]{20}$/);
  assert.equal(sb.templateID, "base");
  assert.equal(sb.envdVersion, "0.6.13");
  assert.ok(sb.envdAccessToken);
  assert.equal(typeof sb.clientID, "string");
  const d = (await call("GET", `/sandboxes/${sb.sandboxID}`)).json();
  assert.equal(d.state, "running");
  assert.deepEqual(d.metadata, { k: "v w" });
  assert.equal(d.cpuCount, 2);
  assert.equal(d.memoryMB, 1024);
  const ms = new Date(d.endAt).getTime() - new Date(d.startedAt).getTime();
  assert.ok(Math.abs(ms - 120_000) < 2000, `timeout ${ms}`);
  assert.deepEqual(d.lifecycle, { onTimeout: "kill", autoResume: false });
});

test("v1 create defaults: timeout 15 s, insecure unless asked", async () => {
  const { call } = await setup();
  const sb = (await call("POST", "/sandboxes", { templateID: "py" })).json();
  assert.equal(sb.envdAccessToken, undefined);
  assert.equal(sb.alias, "py");
  assert.equal(sb.templateID, "tpl123");
  const d = (await call("GET", `/sandboxes/${sb.sandboxID}`)).json();
  const ms = new Date(d.endAt).getTime() - new Date(d.startedAt).getTime();
  assert.ok(Math.abs(ms - 15_000) < 2000);
});

test("auth: missing or wrong key is 401 with the SDK's body", async () => {
  const { app } = await setup();
  for (const headers of [{}, { "x-api-key": "nope" }]) {
    const r = await app.inject({ method: "GET", url: "/v2/sandboxes", headers });
    assert.equal(r.statusCode, 401);
    assert.deepEqual(r.json(), { code: 401, message: "Invalid API key" });
  }
});

test("tenant isolation: another tenant's sandbox is 404 everywhere", async () => {
  const { call } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  for (const [m, u, b] of [
    ["GET", `/sandboxes/${sb.sandboxID}`],
    ["DELETE", `/sandboxes/${sb.sandboxID}`],
    ["POST", `/sandboxes/${sb.sandboxID}/timeout`, { timeout: 5 }],
    ["POST", `/v2/sandboxes/${sb.sandboxID}/connect`, {}],
  ] as const) {
    const r = await call(m, u, b, "key-b");
    assert.equal(r.statusCode, 404, `${m} ${u}`);
    assert.equal(r.json().code, 404);
  }
  assert.equal((await call("GET", "/v2/sandboxes", undefined, "key-b")).json().length, 0);
});

test("disk below the template rootfs is 400 naming both sizes, before the node is called", async () => {
  const { call, substrate } = await setup();
  const r = await call("POST", "/v2/sandboxes", { metadata: { "space.resources": JSON.stringify({ disk_mib: 300 }) } });
  assert.equal(r.statusCode, 400);
  assert.match(r.json().message, /disk_mib=300.*451 MiB/);
  assert.equal(substrate.calls.length, 0);
  for (const bad of [{ vcpu: 0 }, { memory_mib: -1 }, { vcpu: 1.5 }]) {
    const r2 = await call("POST", "/v2/sandboxes", { metadata: { "space.resources": JSON.stringify(bad) } });
    assert.equal(r2.statusCode, 400, JSON.stringify(bad));
  }
});

test("a node's invalid_argument becomes 400 with its message; the row ends failed and the node is cleaned", async () => {
  const { call, substrate, repo } = await setup();
  substrate.failNextStart = new SpaceError("invalid_argument", "rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB");
  const r = await call("POST", "/v2/sandboxes", { templateID: "py" });
  assert.equal(r.statusCode, 400);
  assert.deepEqual(r.json(), { code: 400, message: "rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB" });
  const rows = [...repo.rows.values()];
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.state, "failed");
  assert.ok(substrate.calls.some((c) => c.startsWith("kill ")));
});

test("kill: 204, then 404 with JSON code", async () => {
  const { call, substrate } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  assert.equal((await call("DELETE", `/sandboxes/${sb.sandboxID}`)).statusCode, 204);
  assert.equal(substrate.running.size, 0);
  const r = await call("DELETE", `/sandboxes/${sb.sandboxID}`);
  assert.equal(r.statusCode, 404);
  assert.equal(r.json().code, 404);
  const c = await call("POST", `/v2/sandboxes/${sb.sandboxID}/connect`, { timeout: 10 });
  assert.equal(c.statusCode, 404);
  const u = await call("DELETE", `/sandboxes/aaaaaaaaaaaaaaaaaaaa`);
  assert.deepEqual(u.statusCode, 404);
});

test("Idempotency-Key: a retried create answers with the live sandbox it made; after a failure or a kill it makes a new one", async () => {
  const { app, substrate } = await setup();
  const create = async (key: string, apiKey = "key-a") => {
    const r = await app.inject({ method: "POST", url: "/v2/sandboxes", headers: { "x-api-key": apiKey, "idempotency-key": key, "content-type": "application/json" }, payload: "{}" });
    return { status: r.statusCode, id: r.json().sandboxID as string | undefined, token: r.json().envdAccessToken as string | undefined };
  };
  const a = await create("k-1");
  const again = await create("k-1");
  assert.equal(a.status, 201);
  assert.deepEqual(again, a);
  assert.equal(substrate.running.size, 1);
  assert.notEqual((await create("k-2")).id, a.id);
  const other = await create("k-1", "key-b");
  assert.equal(other.status, 201);
  assert.notEqual(other.id, a.id, "keys are per tenant");

  await app.inject({ method: "DELETE", url: `/sandboxes/${a.id}`, headers: { "x-api-key": "key-a" } });
  const afterKill = await create("k-1");
  assert.equal(afterKill.status, 201);
  assert.notEqual(afterKill.id, a.id);
  assert.deepEqual(await create("k-1"), afterKill);

  substrate.failNextStart = new SpaceError("unavailable", "envd not healthy");
  assert.equal((await create("k-3")).status, 503);
  const retried = await create("k-3");
  assert.equal(retried.status, 201, "a retry after a failed attempt creates the sandbox");
  assert.deepEqual(await create("k-3"), retried);
  assert.equal((await create("")).status, 400, "an empty key is refused (1 to 255 characters)");
});

test("pause = suspend: 204, listed paused, second pause 409; connect restores (201); kill drops the snapshot", async () => {
  const { call, substrate, sandboxes } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", { envVars: { A: "1" } })).json();
  const r = await call("POST", `/sandboxes/${sb.sandboxID}/pause`, {});
  assert.equal(r.statusCode, 204, r.body);
  assert.ok(substrate.calls.includes(`suspend ${sb.sandboxID}`));
  assert.equal(substrate.running.has(sb.sandboxID), false);
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().state, "paused");
  const listed = (await call("GET", `/v2/sandboxes?state=paused`)).json();
  assert.deepEqual(listed.map((x: { sandboxID: string }) => x.sandboxID), [sb.sandboxID]);
  const again = await call("POST", `/sandboxes/${sb.sandboxID}/pause`, {});
  assert.equal(again.statusCode, 409);
  assert.equal(again.json().code, 409);
  assert.match(again.json().message, /already paused/);
  // E2B answers timeout/refreshes for running sandboxes only (SDK 2.0 connect() relies on the 404).
  for (const [u, b] of [["timeout", { timeout: 60 }], ["refreshes", { duration: 60 }]] as const) {
    const t = await call("POST", `/sandboxes/${sb.sandboxID}/${u}`, b);
    assert.deepEqual([t.statusCode, t.json().code], [404, 404], `${u} of a paused sandbox`);
  }
  // Concurrent connects converge on one restore.
  substrate.restoreDelayMs = 100;
  const [c1, c2, c3] = await Promise.all([1, 2, 3].map(() => call("POST", `/v2/sandboxes/${sb.sandboxID}/connect`, { timeout: 60 })));
  assert.deepEqual([c1!.statusCode, c2!.statusCode, c3!.statusCode].sort(), [201, 201, 201]);
  assert.equal(substrate.calls.filter((c) => c.startsWith(`restore ${sb.sandboxID}`)).length, 1);
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().state, "running");
  assert.equal((await call("POST", `/v2/sandboxes/${sb.sandboxID}/connect`, {})).statusCode, 200);
  // Second cycle; then a kill of the suspended sandbox deletes its snapshots.
  assert.equal((await call("POST", `/sandboxes/${sb.sandboxID}/pause`, {})).statusCode, 204);
  assert.equal((await call("DELETE", `/sandboxes/${sb.sandboxID}`)).statusCode, 204);
  const live = [...(sandboxes.snapshots as unknown as { rows: Map<string, { sandboxId: string; state: string }> }).rows.values()].filter(
    (x) => x.sandboxId === sb.sandboxID && x.state !== "deleted" && x.state !== "failed",
  );
  assert.deepEqual(live, []);
});

test("a failed suspend leaves the sandbox running", async () => {
  const { call, substrate } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  substrate.failNextSuspend = new SpaceError("internal", "criu said no");
  const r = await call("POST", `/sandboxes/${sb.sandboxID}/pause`, {});
  assert.equal(r.statusCode, 500);
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().state, "running");
  assert.equal((await call("POST", `/sandboxes/${sb.sandboxID}/pause`, {})).statusCode, 204);
});

test("fork: 201 with one entry per fork", async () => {
  const { call } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  const f = await call("POST", `/sandboxes/${sb.sandboxID}/fork`, { count: 2, timeout: 60 });
  assert.equal(f.statusCode, 201, f.body);
  const forks = f.json() as Array<{ sandbox?: { sandboxID: string } }>;
  assert.equal(forks.length, 2);
  for (const x of forks) {
    assert.ok(x.sandbox?.sandboxID && x.sandbox.sandboxID !== sb.sandboxID);
    assert.equal((await call("GET", `/sandboxes/${x.sandbox.sandboxID}`)).json().state, "running");
  }
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().state, "running");
  assert.equal((await call("POST", `/sandboxes/aaaaaaaaaaaaaaaaaaaa/fork`, {})).statusCode, 404);
});

test("named snapshots: create (source keeps running), list by sandbox/name with pages, tenant isolation, create from one", async () => {
  const { call } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  const a = await call("POST", `/sandboxes/${sb.sandboxID}/snapshots`, { name: "first" });
  assert.equal(a.statusCode, 201, a.body);
  assert.match(a.json().snapshotID, /^sn_[a-z0-9]{16}$/);
  assert.deepEqual(a.json().names, ["first"]);
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().state, "running");
  const b = (await call("POST", `/sandboxes/${sb.sandboxID}/snapshots`, {})).json();
  assert.deepEqual(b.names, []);
  assert.equal((await call("POST", `/sandboxes/${sb.sandboxID}/snapshots`, { name: "first" })).statusCode, 409);
  assert.equal((await call("POST", `/sandboxes/aaaaaaaaaaaaaaaaaaaa/snapshots`, {})).statusCode, 404);
  assert.equal((await call("POST", `/sandboxes/${sb.sandboxID}/snapshots`, {}, "key-b")).statusCode, 404);

  const all = await call("GET", `/snapshots?sandboxID=${sb.sandboxID}`);
  assert.deepEqual((all.json() as Array<{ snapshotID: string }>).map((x) => x.snapshotID), [b.snapshotID, a.json().snapshotID]);
  assert.equal(all.headers["x-next-token"], undefined);
  const p1 = await call("GET", `/snapshots?limit=1`);
  assert.deepEqual(p1.json(), [b]);
  const p2 = await call("GET", `/snapshots?limit=1&nextToken=${String(p1.headers["x-next-token"])}`);
  assert.deepEqual((p2.json() as Array<{ snapshotID: string }>).map((x) => x.snapshotID), [a.json().snapshotID]);
  assert.deepEqual((await call("GET", `/snapshots?name=first`)).json(), [a.json()]);
  assert.deepEqual((await call("GET", `/snapshots`, undefined, "key-b")).json(), []);

  // A sandbox from a snapshot, by id and by name: a new id; another tenant's is not found.
  const c = await call("POST", "/v2/sandboxes", { templateID: a.json().snapshotID, timeout: 60 });
  assert.equal(c.statusCode, 201, c.body);
  assert.notEqual(c.json().sandboxID, sb.sandboxID);
  assert.equal((await call("GET", `/sandboxes/${c.json().sandboxID}`)).json().state, "running");
  assert.equal((await call("POST", "/v2/sandboxes", { templateID: "first" })).statusCode, 201);
  assert.equal((await call("POST", "/v2/sandboxes", { templateID: a.json().snapshotID }, "key-b")).statusCode, 404);
});

test("connect: 200 when running, timeout only extended", async () => {
  const { call } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", { timeout: 600 })).json();
  const before = (await call("GET", `/sandboxes/${sb.sandboxID}`)).json().endAt;
  const r = await call("POST", `/v2/sandboxes/${sb.sandboxID}/connect`, { timeout: 10 });
  assert.equal(r.statusCode, 200);
  assert.equal(r.json().sandboxID, sb.sandboxID);
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().endAt, before);
  await call("POST", `/sandboxes/${sb.sandboxID}/connect`, { timeout: 3600 });
  assert.ok((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().endAt > before);
  // setTimeout may shorten
  assert.equal((await call("POST", `/sandboxes/${sb.sandboxID}/timeout`, { timeout: 5 })).statusCode, 204);
  const d = (await call("GET", `/sandboxes/${sb.sandboxID}`)).json();
  assert.ok(new Date(d.endAt).getTime() - Date.now() < 6000);
  // refresh never shortens
  assert.equal((await call("POST", `/sandboxes/${sb.sandboxID}/refreshes`, { duration: 1 })).statusCode, 204);
  assert.equal((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().endAt, d.endAt);
});

test("list: pagination never skips or repeats while sandboxes come and go; filters", async () => {
  const { call } = await setup();
  const ids: string[] = [];
  for (let i = 0; i < 7; i++) ids.push((await call("POST", "/v2/sandboxes", { metadata: { "a b": i % 2 ? "c&d" : "x", n: String(i) } })).json().sandboxID);
  const seen: string[] = [];
  let token: string | undefined;
  let page = 0;
  do {
    const r = await call("GET", `/v2/sandboxes?limit=2${token ? `&nextToken=${encodeURIComponent(token)}` : ""}`);
    assert.equal(r.statusCode, 200);
    seen.push(...r.json().map((s: { sandboxID: string }) => s.sandboxID));
    token = r.headers["x-next-token"] as string | undefined;
    if (page === 0) {
      // churn: a new one (newer than the cursor: not in this desc walk) and a kill of a seen one
      await call("POST", "/v2/sandboxes", {});
      await call("DELETE", `/sandboxes/${seen[0]}`);
    }
    page++;
  } while (token);
  assert.equal(new Set(seen).size, seen.length, "no repeats");
  assert.deepEqual([...seen].sort(), [...ids].sort());
  // triple-encoded metadata filter, as the SDK sends it
  const inner = new URLSearchParams({ [encodeURIComponent("a b")]: encodeURIComponent("c&d") }).toString();
  const r = await call("GET", `/v2/sandboxes?metadata=${encodeURIComponent(inner)}`);
  assert.deepEqual(r.json().map((s: { sandboxID: string }) => s.sandboxID).sort(), [ids[1], ids[3], ids[5]].sort());
  assert.equal((await call("GET", "/v2/sandboxes?state=paused")).json().length, 0);
  assert.equal((await call("GET", "/v2/sandboxes?state=bogus")).statusCode, 400);
  assert.equal((await call("GET", "/v2/sandboxes?limit=0")).statusCode, 400);
  assert.equal((await call("GET", "/v2/sandboxes?limit=101")).statusCode, 400);
});

test("metadata filter decoding", () => {
  assert.deepEqual(decodeMetadataFilter("a%2520b=c%2526d"), { "a b": "c&d" });
  assert.deepEqual(decodeMetadataFilter("k=v&x=y"), { k: "v", x: "y" });
});

test("metrics and logs have the SDK's shapes", async () => {
  const { call } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  const m = (await call("GET", `/sandboxes/${sb.sandboxID}/metrics`)).json();
  assert.equal(m.length, 1);
  assert.equal(typeof m[0].timestampUnix, "number");
  assert.equal(m[0].cpuCount, 2);
  const past = Math.floor(Date.now() / 1000) - 3600;
  assert.deepEqual((await call("GET", `/sandboxes/${sb.sandboxID}/metrics?start=${past - 60}&end=${past}`)).json(), []);
  assert.deepEqual((await call("GET", `/v2/sandboxes/${sb.sandboxID}/logs`)).json(), { logs: [] });
  const net = await call("PUT", `/sandboxes/${sb.sandboxID}/network`, { denyOut: ["0.0.0.0/0"], allowOut: ["1.1.1.1"] });
  assert.equal(net.statusCode, 204);
  assert.deepEqual((await call("GET", `/sandboxes/${sb.sandboxID}`)).json().network.denyOut, ["0.0.0.0/0"]);
});

test("logs v1/v2: the node's entries with E2B's shapes and query semantics; 400 naming a bad field; others' sandboxes 404", async () => {
  const { call, substrate } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
  substrate.logEntries.set(sb.sandboxID, [
    { timestamp: at(1), level: "debug", message: "request", fields: { logger: "http" } },
    { timestamp: at(2), level: "info", message: "process started", fields: { logger: "processSvc", pid: "7" } },
    { timestamp: at(3), level: "warn", message: "process ended", fields: { logger: "processSvc", exitCode: "3" } },
  ]);
  const v2 = (q: string) => call("GET", `/v2/sandboxes/${sb.sandboxID}/logs${q}`);
  assert.deepEqual((await v2("")).json().logs.map((e: { message: string }) => e.message), ["request", "process started", "process ended"]);
  assert.deepEqual((await v2("?level=info&direction=backward&limit=1")).json().logs.map((e: { message: string }) => e.message), ["process ended"]);
  assert.deepEqual((await v2(`?cursor=${Date.parse(at(2))}&search=process`)).json().logs.length, 2);
  const v1 = (await call("GET", `/sandboxes/${sb.sandboxID}/logs?start=${Date.parse(at(2))}&limit=1`)).json();
  assert.deepEqual(v1.logs, [{ timestamp: at(2), line: JSON.stringify({ logger: "processSvc", pid: "7", level: "info", message: "process started" }) }]);
  assert.deepEqual(v1.logEntries.map((e: { message: string }) => e.message), ["process started"]);
  for (const [q, field] of [["?level=trace", "level"], ["?direction=up", "direction"], ["?limit=1001", "limit"], ["?cursor=-1", "cursor"]] as const) {
    const r = await v2(q);
    assert.equal(r.statusCode, 400, q);
    assert.match(r.json().message, new RegExp(field));
  }
  assert.equal((await call("GET", `/v2/sandboxes/${sb.sandboxID}/logs`, undefined, "key-b")).statusCode, 404);
  await call("DELETE", `/sandboxes/${sb.sandboxID}`);
  assert.equal((await v2("")).json().logs.length, 3, "a killed sandbox's logs, while its node keeps them");
});

test("metrics: the node's samples of the range; batch: the latest of each listed sandbox, others' left out", async () => {
  const { call, substrate } = await setup();
  const a = (await call("POST", "/v2/sandboxes", {})).json().sandboxID as string;
  const b = (await call("POST", "/v2/sandboxes", {}, "key-b")).json().sandboxID as string;
  const now = Math.floor(Date.now() / 1000);
  const sample = (s: number) => ({ timestamp: new Date(s * 1000).toISOString(), cpuCount: 2, cpuUsedPct: s % 7, memUsed: 1, memTotal: 2, memCache: 0, diskUsed: 1, diskTotal: 2 });
  substrate.history.set(a, [sample(now - 10), sample(now - 5), sample(now)]);
  const range = (await call("GET", `/sandboxes/${a}/metrics?start=${now - 6}&end=${now - 1}`)).json();
  assert.deepEqual(range.map((m: { timestampUnix: number }) => m.timestampUnix), [now - 5]);
  assert.equal((await call("GET", `/sandboxes/${a}/metrics`)).json().length, 3);
  const batch = (await call("GET", `/sandboxes/metrics?sandbox_ids=${a},${b},nosuchsandbox0000000`)).json();
  assert.deepEqual(Object.keys(batch.sandboxes), [a]);
  assert.equal(batch.sandboxes[a].timestampUnix, now);
  assert.equal((await call("GET", "/sandboxes/metrics")).statusCode, 400);
});

test("empty JSON body with a JSON content type is accepted", async () => {
  const { app, call } = await setup();
  const sb = (await call("POST", "/v2/sandboxes", {})).json();
  const r = await app.inject({ method: "POST", url: `/sandboxes/${sb.sandboxID}/connect`, headers: { "x-api-key": "key-a", "content-type": "application/json" }, payload: "" });
  assert.equal(r.statusCode, 200);
});
