/**
 * Traces end to end: a real OTLP/HTTP receiver in the test (the exporter's JSON encoding,
 * decoded as the OTLP spec defines it: ids in hex, spans under resourceSpans → scopeSpans)
 * and one `space up` exporting to it (OTEL_EXPORTER_OTLP_ENDPOINT). One e2b SDK create
 * must arrive as one trace with spans from the API, the sandbox service, the node-api
 * client, the node and the runtime, each the child of the one before; a Native create
 * continues its API trace in the controller's dispatcher, and a Native command reaches
 * the node's proxy into envd in the same trace; a log line written inside a span carries
 * its trace and span ids. Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, type ConnectionOpts } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";
import { startOtlpReceiver, type ReceivedSpan } from "../support/otlp-receiver.ts";
import { ALL, NativeClient, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

/** From `leaf` up to the root: each span's parent, as long as the trace holds it. */
function ancestry(spans: ReceivedSpan[], leaf: ReceivedSpan): ReceivedSpan[] {
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const chain = [leaf];
  for (let s = leaf; s.parentSpanId; ) {
    const parent = byId.get(s.parentSpanId);
    assert.ok(parent, `span ${s.name} names parent ${s.parentSpanId}, which is not in its trace`);
    chain.push(parent);
    s = parent;
  }
  return chain;
}

describe("traces: an SDK create arrives at an OTLP receiver as one trace", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];

  before(async () => {
    receiver = await startOtlpReceiver();
    stack = await startStack({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_SERVICE_NAME: "space-e2e",
        // The ECW edge's refusal lines (debug) carry the trace id the last test looks for.
        SPACE_LOG_LEVEL: "debug",
        // The SDK's own batch delay (default 5 s): the test waits less.
        OTEL_BSP_SCHEDULE_DELAY: "200",
      },
    });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
    receiver?.server.close();
  });

  test("api → sandboxes → substrate → node → runtime, one trace id, each span the child of the one before", async () => {
    const sb = await Sandbox.create(opts);
    created.push(sb);
    const isCreate = (s: ReceivedSpan) => s.name === "sandboxes.create" && s.attributes["space.sandbox.id"] === sb.sandboxId;
    const create = await waitFor(() => receiver.spans.find(isCreate), "the create's sandboxes.create span", 30_000);
    const runtime = await waitFor(
      () => receiver.spans.find((s) => s.traceId === create.traceId && s.name === "runtime start"),
      "the runtime span in the create's trace",
      30_000,
    );
    const trace = receiver.spans.filter((s) => s.traceId === create.traceId);
    const chain = ancestry(trace, runtime);
    assert.deepEqual(
      chain.map((s) => s.component),
      ["runtime", "node", "substrate", "sandboxes", "api"],
      chain.map((s) => `${s.component}: ${s.name}`).join(" ← "),
    );
    assert.equal(chain[1]!.name, "node POST /v1/sandboxes");
    assert.equal(chain[2]!.name, "substrate POST /v1/sandboxes");
    assert.match(chain[4]!.name, /^api POST \/(v\d+\/)?sandboxes$/);
    assert.equal(chain[4]!.parentSpanId, "", "the API span is the root (the SDK sends no traceparent)");
    assert.ok(trace.every((s) => s.service === "space-e2e"), "OTEL_SERVICE_NAME names the service");
    assert.ok(trace.some((s) => s.name === "node envd ready" && ancestry(trace, s).includes(chain[1]!)), "envd readiness is under the node's span");
  });

  test("pause and resume: each one trace from the API down to the node (and the runtime's restore)", async () => {
    const sb = created[0]!;
    const of = (name: string, id: string) => (s: ReceivedSpan) => s.name === name && s.attributes["space.sandbox.id"] === id;
    assert.equal(await sb.pause(), true);
    const pause = await waitFor(() => receiver.spans.find(of("sandboxes.pause", sb.sandboxId)), "sandboxes.pause", 30_000);
    const suspend = await waitFor(
      () => receiver.spans.find((s) => s.traceId === pause.traceId && s.name === "node POST /v1/sandboxes/:id/suspend"),
      "the node's suspend span in the pause's trace",
      30_000,
    );
    const pauseChain = ancestry(receiver.spans.filter((s) => s.traceId === pause.traceId), suspend).map((s) => s.component);
    assert.deepEqual(pauseChain, ["node", "substrate", "sandboxes", "api"]);

    await Sandbox.connect(sb.sandboxId, opts);
    const resume = await waitFor(() => receiver.spans.find(of("sandboxes.resume", sb.sandboxId)), "sandboxes.resume", 30_000);
    assert.equal(resume.attributes["space.resume.path"], "restore");
    const restore = await waitFor(
      () => receiver.spans.find((s) => s.traceId === resume.traceId && s.name === "runtime restore"),
      "the runtime's restore in the resume's trace",
      30_000,
    );
    const resumeChain = ancestry(receiver.spans.filter((s) => s.traceId === resume.traceId), restore).map((s) => s.component);
    assert.deepEqual(resumeChain, ["runtime", "node", "substrate", "sandboxes", "api"]);
  });

  test("a Native create: the controller's dispatcher continues the API's trace", async () => {
    const t = await tenantWithToken(stack.apiUrl, stack.adminToken, "traces-native", ALL);
    const native = new NativeClient(stack.apiUrl, t.token);
    const r = await native.req("POST", "/v1/sandboxes", { body: { template: "no-such-template-for-traces" } });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    assert.equal((await native.wait(r.body.id)).state, "failed");
    const op = await waitFor(
      () => receiver.spans.find((s) => s.component === "controller" && s.attributes["space.operation.id"] === r.body.id),
      "the dispatcher's span of the operation",
      30_000,
    );
    const create = await waitFor(() => receiver.spans.find((s) => s.traceId === op.traceId && s.name === "sandboxes.create"), "sandboxes.create under it", 30_000);
    const chain = ancestry(receiver.spans.filter((s) => s.traceId === op.traceId), create);
    assert.deepEqual(chain.map((s) => s.component), ["sandboxes", "controller", "api"], chain.map((s) => s.name).join(" ← "));
    assert.equal(chain[2]!.name, "api POST /v1/sandboxes");
  });

  test("a Native command: api → controller → the node's proxy into envd, one trace", async () => {
    const t = await tenantWithToken(stack.apiUrl, stack.adminToken, "traces-commands", ALL);
    const native = new NativeClient(stack.apiUrl, t.token);
    const sid = await native.create();
    try {
      const { op, stdout } = await native.run(sid, { cmd: "/bin/sh", args: ["-c", "echo traced"] });
      assert.equal(stdout, "traced\n");
      const run = await waitFor(
        () => receiver.spans.find((s) => s.component === "controller" && s.attributes["space.operation.id"] === op.id),
        "the dispatcher's span of the command",
        30_000,
      );
      const proxied = await waitFor(
        () => receiver.spans.find((s) => s.traceId === run.traceId && s.component === "node" && s.name.includes("/proxy/")),
        "the node's proxy span in the command's trace",
        30_000,
      );
      const chain = ancestry(receiver.spans.filter((s) => s.traceId === run.traceId), proxied).map((s) => s.component);
      assert.deepEqual(chain, ["node", "controller", "api"]);
    } finally {
      await native.req("DELETE", `/v1/sandboxes/${sid}`);
    }
  });

  test("a log line written inside a span carries its trace id", async () => {
    await assert.rejects(Sandbox.create("no-such-template-for-traces", opts));
    const refused = await waitFor(
      () => receiver.spans.find((s) => s.component === "api" && /sandboxes$/.test(s.name) && s.attributes["http.response.status_code"] === 404),
      "the refused create's API span",
      30_000,
    );
    // The ECW edge logs the refusal (debug) while the request's span is active.
    const line = await waitFor(
      () => stack.output().split("\n").find((l) => l.includes(`"trace_id":"${refused.traceId}"`)),
      `a log line with trace id ${refused.traceId}; refusals logged: ${stack.output().split("\n").filter((l) => l.includes("ECW request refused")).join("\n")}`,
      10_000,
    );
    assert.match(line, /ECW request refused/);
    assert.match(line, new RegExp(`"span_id":"${refused.spanId}"`));
  });
});
