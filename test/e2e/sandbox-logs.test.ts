/**
 * Sandbox logs and metrics history end to end (issue 20 items 11 and 12): the real stack,
 * the unmodified e2b SDK. The SDK has no logs method, so logs go through its own
 * `ApiClient` (the OpenAPI paths it ships); metrics through `getMetrics({ start, end })`.
 * The node samples at its default interval (5 s, as E2B). Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { ApiClient, ConnectionConfig, Sandbox, CommandExitError, type ConnectionOpts, type components } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

type Entry = components["schemas"]["SandboxLogEntry"];
type V2Query = { cursor?: number; limit?: number; direction?: "forward" | "backward"; level?: Entry["level"]; search?: string };

describe("sandbox logs and metrics history with the e2b SDK", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let api: ApiClient["api"];
  const created: Sandbox[] = [];
  const create = async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    created.push(sb);
    return sb;
  };

  const v2 = async (id: string, query: V2Query = {}): Promise<Entry[]> => {
    const r = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: id }, query } });
    assert.equal(r.response.status, 200, JSON.stringify(r.error));
    return r.data!.logs;
  };
  const has = (logs: Entry[], message: string, arg: string) => logs.some((e) => e.message === message && (e.fields.args ?? "").includes(arg));

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    api = new ApiClient(new ConnectionConfig(opts)).api;
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  test("logs after running commands: envd's process lines in E2B's entry shape, v2 and v1", async () => {
    const sb = await create();
    await sb.commands.run("echo logs-e2e");
    await assert.rejects(sb.commands.run("echo failing-e2e; exit 3"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 3);

    const logs = await v2(sb.sandboxId);
    assert.ok(has(logs, "process started", "echo logs-e2e"), JSON.stringify(logs.slice(-10)));
    for (const e of logs) {
      assert.ok(Number.isFinite(Date.parse(e.timestamp)), e.timestamp);
      assert.ok(["debug", "info", "warn", "error"].includes(e.level), e.level);
      assert.equal(typeof e.message, "string");
      for (const v of Object.values(e.fields)) assert.equal(typeof v, "string");
    }
    const failed = logs.find((e) => e.message === "process ended" && e.fields.exitCode === "3");
    assert.equal(failed?.level, "warn", JSON.stringify(logs.filter((e) => e.message === "process ended")));
    assert.equal(failed?.fields.logger, "processSvc");
    const times = logs.map((e) => Date.parse(e.timestamp));
    assert.ok(times.every((t, i) => i === 0 || t > times[i - 1]!), "timestamps strictly increase");

    const v1 = await api.GET("/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: sb.sandboxId }, query: { start: times[0] } } });
    assert.equal(v1.response.status, 200);
    assert.equal(v1.data!.logs.length, v1.data!.logEntries.length);
    assert.ok(v1.data!.logs.length >= logs.length);
    // The e2b CLI parses each line as JSON and reads its level and logger.
    const line = JSON.parse(v1.data!.logs.find((l) => l.line.includes("logs-e2e"))!.line) as Record<string, string>;
    assert.deepEqual([line.level, line.logger, line.message], ["info", "processSvc", "process started"]);
  });

  test("v2 paging by cursor (forward and backward), level and search filters, bad input", async () => {
    const sb = await create();
    for (let i = 0; i < 4; i++) await sb.commands.run(`echo page-${i}`);
    const all = await v2(sb.sandboxId);
    assert.ok(all.length >= 8, `${all.length} entries`);
    const last = Date.parse(all.at(-1)!.timestamp);

    const paged: Entry[] = [];
    let cursor: number | undefined;
    for (;;) {
      const page = await v2(sb.sandboxId, { limit: 3, direction: "forward", ...(cursor !== undefined ? { cursor } : {}) });
      assert.ok(page.length <= 3);
      const mine = page.filter((e) => Date.parse(e.timestamp) <= last);
      paged.push(...mine);
      if (mine.length < page.length || page.length < 3) break;
      cursor = Date.parse(page.at(-1)!.timestamp) + 1;
    }
    assert.deepEqual(paged, all);

    const newest = await v2(sb.sandboxId, { limit: 2, direction: "backward", cursor: last });
    assert.deepEqual(newest, all.slice(-2).reverse());
    const older = await v2(sb.sandboxId, { limit: 2, direction: "backward", cursor: Date.parse(newest.at(-1)!.timestamp) - 1 });
    assert.deepEqual(older, all.slice(-4, -2).reverse());

    assert.ok(all.some((e) => e.level === "debug"), "requests are logged at debug");
    const info = await v2(sb.sandboxId, { level: "info" });
    assert.ok(info.length > 0 && info.every((e) => e.level !== "debug"));
    assert.ok(has(info, "process started", "echo page-3"));
    const found = await v2(sb.sandboxId, { search: "process ended" });
    assert.ok(found.length >= 4 && found.every((e) => e.message.includes("process ended")));

    const bad = await fetch(`${stack.apiUrl}/v2/sandboxes/${sb.sandboxId}/logs?level=loud`, { headers: { "X-API-KEY": stack.apiKey } });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /level/);
    const badDir = await fetch(`${stack.apiUrl}/v2/sandboxes/${sb.sandboxId}/logs?direction=sideways`, { headers: { "X-API-KEY": stack.apiKey } });
    assert.equal(badDir.status, 400);
    const unknown = await api.GET("/v2/sandboxes/{sandboxID}/logs", { params: { path: { sandboxID: "nosuchsandbox0000000" } } });
    assert.equal(unknown.response.status, 404);
  });

  test("logs survive pause and connect, and stay readable after kill", async () => {
    const sb = await create();
    await sb.commands.run("echo before-pause");
    await sb.pause();
    assert.ok(has(await v2(sb.sandboxId), "process started", "before-pause"), "kept while paused");
    const again = await Sandbox.connect(sb.sandboxId, opts);
    await again.commands.run("echo after-connect");
    const logs = await v2(sb.sandboxId);
    assert.ok(has(logs, "process started", "before-pause") && has(logs, "process started", "after-connect"), JSON.stringify(logs.slice(-6)));
    await again.kill();
    assert.ok(has(await v2(sb.sandboxId), "process started", "after-connect"), "kept after kill");
  });

  test("a fork's logs start at the fork: none of its source's lines", async () => {
    const sb = await create();
    await sb.commands.run("echo source-only");
    const [fork] = await sb.fork();
    assert.ok(fork instanceof Sandbox, String(fork));
    created.push(fork);
    await fork.commands.run("echo fork-only");
    const logs = await v2(fork.sandboxId);
    assert.ok(has(logs, "process started", "fork-only"), JSON.stringify(logs.slice(-6)));
    assert.ok(!has(logs, "process started", "source-only"), "the source's lines stay the source's");
    assert.ok(has(await v2(sb.sandboxId), "process started", "source-only"));
  });

  test("getMetrics({ start, end }): samples of the range, more than one, at increasing timestamps within it", async () => {
    const sb = await create();
    const start = new Date();
    const samples = await waitFor(async () => {
      const m = await sb.getMetrics({ start, end: new Date() });
      return m.length >= 2 ? m : null;
    }, "two metrics samples", 60_000);
    const end = new Date();
    const times = samples.map((m) => m.timestamp.getTime());
    assert.ok(times.every((t, i) => i === 0 || t > times[i - 1]!), `increasing: ${times.join(",")}`);
    // The SDK sends whole seconds (rounded); the samples are whole seconds too.
    const lo = Math.round(start.getTime() / 1000) * 1000;
    const hi = Math.round(end.getTime() / 1000) * 1000;
    assert.ok(times.every((t) => t >= lo && t <= hi), `${times.join(",")} within [${lo}, ${hi}]`);
    assert.ok(samples.every((m) => m.cpuCount === 2 && m.memTotal > 0));

    const one = await sb.getMetrics({ start: samples[1]!.timestamp, end: samples[1]!.timestamp });
    assert.deepEqual(one.map((m) => m.timestamp.getTime()), [times[1]]);
    const whole = await sb.getMetrics();
    assert.ok(whole.length >= samples.length, "no range: every sample kept since the start");

    const batch = await api.GET("/sandboxes/metrics", { params: { query: { sandbox_ids: [sb.sandboxId] } } });
    assert.equal(batch.response.status, 200);
    assert.equal(batch.data!.sandboxes[sb.sandboxId]?.cpuCount, 2);
  });
});
