/**
 * Metrics end to end (docs/metrics.md): one `space up` with SPACE_METRICS_TOKEN set and
 * the controller's metrics port open, driven by the e2b SDK and the Native API. Each
 * step's scrape is compared with the one before it: the families move by exactly what
 * the step did (one cold create, one pause and resume, a failed create, one Native
 * operation, a fork, a create from a named snapshot). The node's and the controller's
 * own `/metrics` answer, behind the same token. The stack logs for people
 * (SPACE_LOG_FORMAT=pretty) at info, without the node's request lines. Needs root
 * (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, type ConnectionOpts } from "e2b";
import { freePort, startStack, type Stack } from "../support/stack.ts";
import { ALL, NativeClient, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;
const TOKEN = "metrics-token-for-the-e2e-test";

/** A scrape: series `name{labels}` → value, and the families it declares (# TYPE). */
interface Scrape {
  series: Map<string, number>;
  families: Set<string>;
}

function parse(text: string): Scrape {
  const series = new Map<string, number>();
  const families = new Set<string>();
  for (const line of text.split("\n")) {
    if (line.startsWith("# TYPE ")) families.add(line.split(" ")[2]!);
    if (!line || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    // Labels in a fixed order (the default `process` label left out), so a test names a series by its own labels.
    const [, name, labels = ""] = /^([^{ ]+)(?:\{(.*)\})?$/.exec(line.slice(0, at))!;
    const kept = [...labels.matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)].filter((m) => m[1] !== "process").map((m) => `${m[1]}="${m[2]}"`).sort();
    series.set(`${name}{${kept.join(",")}}`, Number(line.slice(at + 1)));
  }
  return { series, families };
}

async function scrape(url: string, token = TOKEN): Promise<Scrape> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(res.status, 200, `${url}: ${res.status} ${await res.clone().text()}`);
  return parse(await res.text());
}

/** The value of a series (labels sorted, as `parse` keeps them), 0 when absent. */
const v = (s: Scrape, series: string) => s.series.get(series) ?? 0;
const delta = (a: Scrape, b: Scrape, series: string) => v(b, series) - v(a, series);

describe("metrics: the space_* families after a create, a pause/resume and a failed create", { skip, timeout: 15 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let nodePort: number;
  let controllerPort: number;
  const created: Sandbox[] = [];
  const api = () => `${stack.apiUrl}/metrics`;

  before(async () => {
    [nodePort, controllerPort] = [await freePort(), await freePort()];
    stack = await startStack({
      env: {
        SPACE_NODE_PORT: String(nodePort),
        SPACE_CONTROLLER_METRICS_PORT: String(controllerPort),
        SPACE_METRICS_TOKEN: TOKEN,
        // The last test reads the log: lines for people, at info.
        SPACE_LOG_LEVEL: "info",
        SPACE_LOG_FORMAT: "pretty",
      },
    });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  test("create, command, pause and resume, failed create: each moves its families by exactly one", async () => {
    const s0 = await scrape(api());
    for (const f of [
      "space_sandbox_create_seconds",
      "space_sandbox_create_failures_total",
      "space_sandbox_pause_seconds",
      "space_sandbox_resume_seconds",
      "space_sandbox_fork_seconds",
      "space_sandboxes",
      "space_operation_queue_depth",
      "space_operation_queue_oldest_age_seconds",
      "space_operation_claims_total",
      "space_template_build_seconds",
      "space_template_build_cache_steps_total",
      "space_gateway_requests_total",
      "space_gateway_bytes_total",
      "space_node_capacity_vcpu",
      "space_node_used_slots",
      "space_node_sandboxes",
    ])
      assert.ok(s0.families.has(f), `${f} is not exported`);

    const sb = await Sandbox.create(opts);
    created.push(sb);
    assert.equal((await sb.commands.run("echo hi")).stdout, "hi\n");
    const s1 = await scrape(api());
    assert.equal(delta(s0, s1, 'space_sandbox_create_seconds_count{path="cold"}'), 1);
    assert.equal(delta(s0, s1, 'space_sandboxes{state="running",template="base"}'), 1);
    assert.ok(delta(s0, s1, 'space_gateway_requests_total{route="envd",status="200"}') >= 1, "the command went through the gateway");
    assert.ok(delta(s0, s1, 'space_gateway_bytes_total{direction="out",route="envd"}') > 0, "the command's output was counted");

    assert.equal(await sb.pause(), true);
    const s2 = await scrape(api());
    assert.equal(delta(s1, s2, 'space_sandbox_pause_seconds_count{path="suspend"}'), 1);
    assert.equal(delta(s1, s2, 'space_sandboxes{state="running",template="base"}'), -1);
    assert.equal(delta(s1, s2, 'space_sandboxes{state="suspended",template="base"}'), 1);

    const back = await Sandbox.connect(sb.sandboxId, opts);
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
    const s3 = await scrape(api());
    assert.equal(delta(s2, s3, 'space_sandbox_resume_seconds_count{path="restore"}'), 1);
    assert.equal(delta(s2, s3, 'space_sandboxes{state="running",template="base"}'), 1);
    assert.equal(delta(s2, s3, 'space_sandbox_create_seconds_count{path="cold"}'), 0);

    await assert.rejects(Sandbox.create("no-such-template-for-metrics", opts));
    const s4 = await scrape(api());
    assert.equal(delta(s3, s4, 'space_sandbox_create_failures_total{reason="not_found"}'), 1);
    assert.equal(delta(s3, s4, 'space_sandbox_create_seconds_count{path="cold"}'), 0);
    assert.equal(delta(s3, s4, 'space_sandboxes{state="running",template="base"}'), 0);
  });

  test("a Native create is claimed once by the dispatcher and its failure counted", async () => {
    const t = await tenantWithToken(stack.apiUrl, stack.adminToken, "metrics-native", ALL);
    const native = new NativeClient(stack.apiUrl, t.token);
    const s0 = await scrape(api());
    const r = await native.req("POST", "/v1/sandboxes", { body: { template: "no-such-template-for-metrics" } });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    assert.equal((await native.wait(r.body.id)).state, "failed");
    const s1 = await scrape(api());
    assert.equal(delta(s0, s1, 'space_operation_claims_total{kind="sandbox.create"}'), 1);
    assert.equal(delta(s0, s1, 'space_operation_finished_total{kind="sandbox.create",result="failed"}'), 1);
    assert.equal(delta(s0, s1, 'space_sandbox_create_failures_total{reason="not_found"}'), 1);
    assert.equal(v(s1, 'space_operation_queue_depth{kind="sandbox.create",state="queued"}'), 0);
  });

  test("the node's and the controller's /metrics answer, behind SPACE_METRICS_TOKEN", async () => {
    const node = `http://127.0.0.1:${nodePort}/metrics`;
    const controller = `http://127.0.0.1:${controllerPort}/metrics`;
    for (const url of [node, controller, api()]) assert.equal((await fetch(url)).status, 401, `${url} without the token`);
    const n = await scrape(node);
    // One node: its series carry its id, whatever it is.
    const one = (family: string) => [...n.series].find(([k]) => k.startsWith(`${family}{node=`))?.[1];
    const shown = [...n.series].filter(([k]) => k.startsWith("space_node_")).map(([k, x]) => `${k} ${x}`).join("\n");
    assert.ok((one("space_node_capacity_vcpu") ?? 0) > 0);
    assert.ok((one("space_node_capacity_memory_bytes") ?? 0) > 0);
    assert.equal(one("space_node_capacity_slots"), 200, "SPACE_NODE_MAX_SLOTS of the test stack");
    assert.ok((one("space_node_used_slots") ?? 0) >= 1, `the running sandbox holds a slot:\n${shown}`);
    assert.ok((one("space_node_allocated_vcpu") ?? 0) >= 1, "the running sandbox's vCPU");
    assert.equal(v(n, 'space_node_sandboxes{state="running"}'), 1);
    assert.ok(v(n, "space_node_sandbox_processes{}") >= 1, "envd runs in it");
    // The cold create made the node keep disks ahead for its template (SPACE_NODE_WARM_DISKS, 2).
    const warm = [...n.series].filter(([k]) => k.startsWith("space_node_warm_disks{template="));
    assert.ok(warm.some(([, x]) => x === 2), `warm disks of the created template:\n${shown}`);
    const c = await scrape(controller);
    assert.ok(c.families.has("space_operation_queue_depth"));
    assert.equal(v(c, 'space_sandboxes{state="running",template="base"}'), 1);
  });

  test("a fork and a create from a named snapshot: the fork histogram and the restore path move by one", async () => {
    const sb = created[0]!;
    const s0 = await scrape(api());
    const forks = await sb.fork({ count: 1 });
    for (const f of forks) if (f instanceof Sandbox) created.push(f);
    assert.ok(forks[0] instanceof Sandbox, String(forks[0]));
    const s1 = await scrape(api());
    assert.equal(delta(s0, s1, "space_sandbox_fork_seconds_count{}"), 1);
    assert.equal(delta(s0, s1, 'space_sandboxes{state="running",template="base"}'), 1);

    const snap = await sb.createSnapshot();
    const restored = await Sandbox.create(snap.snapshotId, opts);
    created.push(restored);
    const s2 = await scrape(api());
    assert.equal(delta(s1, s2, 'space_sandbox_create_seconds_count{path="restore"}'), 1);
    assert.equal(delta(s1, s2, 'space_sandbox_create_seconds_count{path="cold"}'), 0);
  });

  test("space up's log: pretty lines (SPACE_LOG_FORMAT=pretty), the node's request lines below info", () => {
    const out = stack.output();
    assert.match(out, /INFO \(space\): controller elected leader/);
    assert.ok(!out.split("\n").some((l) => l.startsWith("{")), "no JSON lines");
    // Fastify's own request lines, and the node's at debug: the creates and scrapes above made many.
    assert.doesNotMatch(out, /incoming request|request completed|node-api request/);
  });
});
