import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createLogger } from "../../core/log.ts";
import type { SandboxMetrics } from "../../contract/node-api.ts";
import type { EnvdLogsPage } from "../../contract/envd-logs.ts";
import { EnvdLogRing } from "../../envd/log-ring.ts";
import { SandboxLogStore, type EnvdTarget } from "./sandbox-log-store.ts";
import { SandboxTelemetry, type Observed } from "./sandbox-telemetry.ts";
import { ForegroundActivity } from "../../core/foreground-activity.ts";

const logger = createLogger("silent", "test");
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), "space-telemetry-"));
  dirs.push(d);
  return d;
};
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const ID = "abcdefghij0123456789";
const OTHER = "zzzzzzzzzz0123456789";
const target: EnvdTarget = { host: "127.0.0.1", port: 1, accessToken: undefined };

/** envd stand-ins: the page source is whichever ring `current` names. */
function envds() {
  const rings = { a: new EnvdLogRing(), b: new EnvdLogRing() };
  let current: keyof typeof rings = "a";
  const asked: number[] = [];
  /** Entries envd sent, page after page. */
  const sent: number[] = [];
  return {
    rings,
    use: (k: keyof typeof rings) => (current = k),
    asked,
    sent,
    fetchPage: async (_id: string, _t: EnvdTarget, after: number, limit = 1000): Promise<EnvdLogsPage> => {
      asked.push(after);
      const page = rings[current].page(after, limit);
      sent.push(page.entries.length);
      return page;
    },
  };
}

const messages = async (store: SandboxLogStore, id = ID) => (await store.query(id, { direction: "forward", limit: 1000 })).map((e) => e.message);

describe("the node's log store", () => {
  it("pulls by cursor, keeps the bound, survives a reload from disk", async () => {
    const dir = tmp();
    const e = envds();
    const store = new SandboxLogStore({ dir, maxEntries: 3, retentionMs: 60_000, fetchPage: e.fetchPage, logger });
    for (const m of ["a1", "a2"]) e.rings.a.push("info", m);
    await store.pull(ID, target);
    e.rings.a.push("info", "a3");
    e.rings.a.push("warn", "a4");
    await store.pull(ID, target);
    assert.deepEqual(e.asked, [0, 2]);
    assert.deepEqual(await messages(store), ["a2", "a3", "a4"]);
    const again = new SandboxLogStore({ dir, maxEntries: 3, retentionMs: 60_000, fetchPage: e.fetchPage, logger });
    assert.deepEqual(await messages(again), ["a2", "a3", "a4"]);
    e.rings.a.push("info", "a5");
    await again.pull(ID, target);
    assert.deepEqual(await messages(again), ["a3", "a4", "a5"]);
  });

  it("a new envd boot starts the cursor again; a sandbox restored from another's checkpoint skips what it inherited", async () => {
    const e = envds();
    const store = new SandboxLogStore({ dir: tmp(), maxEntries: 100, retentionMs: 60_000, fetchPage: e.fetchPage, logger });
    e.rings.a.push("info", "first boot");
    await store.pull(ID, target);
    e.use("b");
    e.rings.b.push("info", "second boot");
    await store.pull(ID, target);
    assert.deepEqual(await messages(store), ["first boot", "second boot"]);

    // A fork of ID: envd (ring b, restored from ID's checkpoint) remembers ID's lines.
    await store.arrived(OTHER, true);
    const before = e.sent.length;
    await store.pull(OTHER, target);
    assert.deepEqual(await messages(store, OTHER), []);
    assert.deepEqual(e.sent.slice(before), [0], "one call, and envd sent none of the lines the fork inherited");
    e.rings.b.push("info", "fork's own");
    await store.pull(OTHER, target);
    assert.deepEqual(await messages(store, OTHER), ["fork's own"]);
  });

  it("an entry is kept within a character budget, whatever envd sends", async () => {
    const huge = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, "v".repeat(4000)]));
    const store = new SandboxLogStore({
      dir: tmp(),
      maxEntries: 10,
      retentionMs: 60_000,
      fetchPage: async () => ({ boot: "b", head: 1, entries: [{ seq: 1, timestamp: new Date().toISOString(), level: "info", message: "m".repeat(9000), fields: huge }] }),
      logger,
    });
    await store.pull(ID, target);
    const [e] = await store.query(ID, { direction: "forward", limit: 1 });
    const size = e!.message.length + Object.entries(e!.fields).reduce((n, [k, v]) => n + k.length + v.length, 0);
    assert.ok(e!.message.length <= 4096 && size <= 8192, `${size}`);
  });

  it("a sandbox restored on a node that never saw it gets envd's whole ring", async () => {
    const e = envds();
    for (const m of ["x", "y"]) e.rings.a.push("info", m);
    const elsewhere = new SandboxLogStore({ dir: tmp(), maxEntries: 100, retentionMs: 60_000, fetchPage: e.fetchPage, logger });
    await elsewhere.arrived(ID, false);
    await elsewhere.pull(ID, target);
    assert.deepEqual(await messages(elsewhere), ["x", "y"]);
  });

  it("kept for the retention after the sandbox left, then swept (files a restarted agent never loaded too)", async () => {
    const dir = tmp();
    const e = envds();
    let now = 1_000_000;
    const store = new SandboxLogStore({ dir, maxEntries: 100, retentionMs: 1000, fetchPage: e.fetchPage, logger, now: () => now });
    e.rings.a.push("info", "kept");
    await store.pull(ID, target);
    await store.left(ID);
    writeFileSync(join(dir, `${OTHER}.json`), JSON.stringify({ seq: 0, entries: [] }));
    utimesSync(join(dir, `${OTHER}.json`), new Date(0), new Date(0));
    now += 500;
    await store.sweep(() => false);
    assert.deepEqual(await messages(store), ["kept"]);
    assert.deepEqual(readdirSync(dir), [`${ID}.json`]);
    now += 1000;
    await store.sweep((id) => id === ID); // still here (stopped): kept
    assert.deepEqual(await messages(store), ["kept"]);
    await store.sweep(() => false);
    assert.deepEqual(readdirSync(dir), []);
    assert.deepEqual(await messages(store), []);
  });
});

describe("the node's telemetry", () => {
  const sample = (t: number): SandboxMetrics => ({ timestamp: new Date(t).toISOString(), cpuCount: 2, cpuUsedPct: 1, memUsed: 1, memTotal: 2, memCache: 0, diskUsed: 1, diskTotal: 2 });

  it("samples at whole seconds into a bounded history, selected by range; a running sandbox with none in a range reaching now gets one", async () => {
    let now = Date.UTC(2026, 0, 1, 0, 0, 0, 400);
    const live: Observed = { id: ID, running: true, envd: target };
    const e = envds();
    const t = new SandboxTelemetry({
      dir: tmp(),
      options: { intervalMs: 5000, metricsSamples: 3, logEntries: 100, retentionMs: 60_000 },
      observed: () => [live],
      sample: async () => sample(now),
      logger,
      fetchPage: e.fetchPage,
      now: () => now,
    });
    assert.equal((await t.metrics(ID, { endMs: now - 60_000 }, live)).length, 0, "a range in the past takes no sample");
    const first = await t.metrics(ID, {}, live);
    assert.deepEqual(first.map((m) => m.timestamp), ["2026-01-01T00:00:00.000Z"]);
    for (let i = 1; i <= 4; i++) {
      now += 5000;
      await t.tick();
    }
    const all = await t.metrics(ID, {}, live);
    assert.deepEqual(all.map((m) => m.timestamp.slice(11, 19)), ["00:00:10", "00:00:15", "00:00:20"]);
    const mid = await t.metrics(ID, { startMs: Date.UTC(2026, 0, 1, 0, 0, 11), endMs: Date.UTC(2026, 0, 1, 0, 0, 15) }, live);
    assert.deepEqual(mid.map((m) => m.timestamp.slice(11, 19)), ["00:00:15"]);
    await t.left(ID);
    assert.equal((await t.metrics(ID, {}, undefined)).length, 3, "kept after the sandbox left");
    assert.deepEqual(await t.metrics(OTHER, {}, undefined), []);
  });

  it("a probe within the age of the tick's answered pull makes no call of its own; an older one, or after a failed pull, asks envd", async () => {
    let now = 1_000_000;
    let fail = false;
    const e = envds();
    const live: Observed = { id: ID, running: true, envd: target };
    const t = new SandboxTelemetry({
      dir: tmp(),
      options: { intervalMs: 5000, metricsSamples: 10, logEntries: 100, retentionMs: 60_000 },
      observed: () => [live],
      sample: async () => sample(now),
      logger,
      fetchPage: async (id, tg, after) => {
        if (fail) throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
        return e.fetchPage(id, tg, after);
      },
      now: () => now,
    });
    await t.tick();
    const afterTick = e.asked.length;
    assert.ok(afterTick > 0, "the tick pulled");
    now += 4000;
    assert.equal(await t.probe(live, 5000), true);
    assert.equal(e.asked.length, afterTick, "answered 4 s ago: no second call");
    now += 2000;
    assert.equal(await t.probe(live, 5000), true);
    assert.equal(e.asked.length, afterTick + 1, "6 s ago: the probe asks envd itself");
    fail = true;
    now += 10_000;
    await t.tick();
    assert.equal(await t.probe(live, 5000), false, "a failed pull is no answer: the probe asks, and hears nothing");
  });

  it("a sandbox's first observation and a round wait while a create runs on the node, at most one interval", async () => {
    const e = envds();
    const live: Observed = { id: ID, running: true, envd: target };
    const foreground = new ForegroundActivity(50);
    let sampled = 0;
    const t = new SandboxTelemetry({
      dir: tmp(),
      options: { intervalMs: 2500, metricsSamples: 10, logEntries: 100, retentionMs: 60_000 },
      observed: () => [live],
      sample: async () => (sampled++, sample(Date.now())),
      foreground,
      logger,
      fetchPage: e.fetchPage,
    });
    try {
      let created!: () => void;
      const create = foreground.run(() => new Promise<void>((r) => (created = r)));
      t.arrived(live, false);
      const round = t.tick();
      await sleep(1200);
      assert.equal(sampled, 0, "1.2 s after arriving, with a create still running: not observed yet");
      assert.equal(e.asked.length, 0, "nor pulled");
      created();
      await create;
      await round;
      await waitFor(() => sampled >= 2);
      assert.equal(sampled, 2, "once the create ended: the round's observation and the first one");

      let done!: () => void;
      const busy = foreground.run(() => new Promise<void>((r) => (done = r)));
      const t0 = performance.now();
      await t.tick();
      assert.ok(performance.now() - t0 >= 2400, "a round waits for a create at most one interval");
      assert.equal(sampled, 3, "then observes anyway");
      done();
      await busy;
    } finally {
      await t.stop();
    }
  });

  it("a quiesced sandbox is not pulled by the tick until resumed", async () => {
    const e = envds();
    const live: Observed = { id: ID, running: true, envd: target };
    const t = new SandboxTelemetry({
      dir: tmp(),
      options: { intervalMs: 5000, metricsSamples: 10, logEntries: 100, retentionMs: 60_000 },
      observed: () => [live],
      sample: async () => sample(Date.now()),
      logger,
      fetchPage: e.fetchPage,
    });
    e.rings.a.push("info", "one");
    await t.quiesce(live);
    const pulls = e.asked.length;
    e.rings.a.push("info", "two");
    await t.tick();
    assert.equal(e.asked.length, pulls);
    t.resumed(ID);
    await t.tick();
    assert.deepEqual((await t.queryLogs(ID, { direction: "forward", limit: 10 }, undefined)).map((x) => x.message), ["one", "two"]);
  });
});

describe("the node's pulls from envd over HTTP", () => {
  it("reuse one connection per sandbox from tick to tick; quiescing it closes that connection", async () => {
    const ring = new EnvdLogRing();
    ring.push("info", "booted");
    let connections = 0;
    let open = 0;
    const server = createServer((req, res) => {
      const after = Number(new URL(req.url ?? "/", "http://x").searchParams.get("after") ?? 0);
      res.setHeader("content-type", "application/json").end(JSON.stringify(ring.page(after, 1000)));
    });
    server.keepAliveTimeout = 65_000;
    server.on("connection", (s) => {
      connections++;
      open++;
      s.on("close", () => open--);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    const live: Observed = { id: ID, running: true, envd: { host: "127.0.0.1", port, accessToken: undefined } };
    const t = new SandboxTelemetry({
      dir: tmp(),
      options: { intervalMs: 5000, metricsSamples: 10, logEntries: 100, retentionMs: 60_000 },
      observed: () => [live],
      sample: async () => ({ timestamp: new Date().toISOString(), cpuCount: 2, cpuUsedPct: 1, memUsed: 1, memTotal: 2, memCache: 0, diskUsed: 1, diskTotal: 2 }),
      logger,
    });
    try {
      for (let i = 0; i < 3; i++) {
        ring.push("info", `line ${i}`);
        await t.tick();
      }
      assert.deepEqual((await t.queryLogs(ID, { direction: "forward", limit: 10 }, undefined)).map((e) => e.message), ["booted", "line 0", "line 1", "line 2"]);
      assert.equal(connections, 1, "three ticks' pulls came over one connection");
      await t.quiesce(live);
      await waitFor(() => open === 0);
      assert.equal(open, 0, "no connection to envd is left open once quiesced");
      t.resumed(ID);
      await t.tick();
      assert.equal(connections, 2, "after a resume, a new connection");
    } finally {
      await t.stop();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

async function waitFor(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 10));
}
