/**
 * Tenant quotas, create rate limits and a full cluster, end to end through the e2b SDK
 * (latest) against a real `space up`: every refusal is a 429 the SDK raises as
 * RateLimitError, naming the limit; a rate limit and a full cluster carry `Retry-After`;
 * other tenants are never affected. A second stack whose rate-limit database is down
 * shows the limiter failing open (the metric moves, creates go through). Needs root.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { RateLimitError, Sandbox, type ConnectionOpts, type SandboxOpts } from "e2b";
import { adminRequest, freePort, metricSum, startStack, waitFor, type Stack } from "../support/stack.ts";
import { NativeClient } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

/** A new tenant with one API key and the given quota overrides. */
async function tenantOf(stack: Stack, name: string, quotas: Record<string, number>): Promise<{ id: string; apiKey: string }> {
  const t = await adminRequest(stack, "POST", "/tenants", { name });
  assert.equal(t.status, 201, JSON.stringify(t.body));
  const id = t.body.id as string;
  const k = await adminRequest(stack, "POST", `/tenants/${id}/keys`, {});
  assert.equal(k.status, 201, JSON.stringify(k.body));
  const q = await adminRequest(stack, "PUT", `/tenants/${id}/quotas`, quotas);
  assert.equal(q.status, 200, JSON.stringify(q.body));
  return { id, apiKey: k.body.key as string };
}

/** A raw ECW create: status, Retry-After and body (what the SDK does not show). */
async function rawCreate(stack: Stack, apiKey: string, metadata: Record<string, string> = {}) {
  const res = await fetch(`${stack.apiUrl}/sandboxes`, {
    method: "POST",
    headers: { "x-api-key": apiKey, "content-type": "application/json" },
    body: JSON.stringify({ templateID: "base", timeout: 120, metadata }),
  });
  const body = (await res.json()) as { code: number; message: string; sandboxID?: string };
  return { status: res.status, retryAfter: res.headers.get("retry-after"), shouldRetry: res.headers.get("should-retry"), body };
}

const isRateLimit = (pattern: RegExp) => (e: unknown) => {
  assert.ok(e instanceof RateLimitError, `expected RateLimitError, got ${String(e)}`);
  assert.match(e.message, pattern);
  return true;
};

describe("tenant quotas, rate limits and a full cluster (e2b SDK)", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let base: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];
  const create = async (apiKey: string, o: Partial<SandboxOpts> = {}) => {
    const sb = await Sandbox.create("base", { ...base, apiKey, ...o });
    created.push(sb);
    return sb;
  };

  before(async () => {
    stack = await startStack({ env: { SPACE_CAPACITY_RETRY_AFTER_S: "2" } });
    base = { apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  // Each test's sandboxes go at its end: the node (2 cores × the vCPU overcommit) holds only a few at once.
  afterEach(async () => {
    await Promise.allSettled(created.splice(0).map((s) => s.kill()));
  });
  after(async () => {
    await stack?.stop();
  });

  test("a quota of 2 sandboxes: the third create is a RateLimitError naming the limit, another tenant still creates, a kill frees the slot at once", async () => {
    const full = await tenantOf(stack, "quota-two", { sandboxes: 2 });
    const a = await create(full.apiKey);
    await create(full.apiKey);
    await assert.rejects(create(full.apiKey), isRateLimit(/tenant quota exceeded: sandboxes 2 of 2/));
    const raw = await rawCreate(stack, full.apiKey);
    assert.equal(raw.status, 429);
    assert.deepEqual(raw.body, { code: 429, message: "tenant quota exceeded: sandboxes 2 of 2" });
    assert.equal(raw.retryAfter, null, "waiting frees no quota: no Retry-After");
    assert.equal(raw.shouldRetry, "false", "and the Python SDK is told not to retry");
    // Another tenant is not affected.
    const other = await create(stack.apiKey);
    assert.equal((await other.commands.run("echo ok")).stdout, "ok\n");
    const q = await adminRequest(stack, "GET", `/tenants/${full.id}/quotas`);
    assert.deepEqual(q.body.usage, { sandboxes: 2, vcpu: 4, memory_mib: 2048, disk_mib: 4096, snapshots: 0, volumes: 0, volume_mib: 0 });
    assert.equal((q.body.limits as Record<string, number>).sandboxes, 2);
    await a.kill();
    const next = await create(full.apiKey);
    assert.equal((await next.commands.run("echo again")).stdout, "again\n");
  });

  test("vCPU and memory quotas refuse with the resource named", async () => {
    const cpu = await tenantOf(stack, "quota-vcpu", { vcpu: 3 });
    const res = (vcpu: number, memory_mib: number) => ({ metadata: { "space.resources": JSON.stringify({ vcpu, memory_mib }) } });
    await create(cpu.apiKey, res(2, 256));
    await assert.rejects(create(cpu.apiKey, res(2, 256)), isRateLimit(/tenant quota exceeded: vcpu 2 of 3 in use, 2 more requested/));
    await create(cpu.apiKey, res(1, 256));
    const mem = await tenantOf(stack, "quota-memory", { memory_mib: 1000 });
    await create(mem.apiKey, res(1, 512));
    await assert.rejects(create(mem.apiKey, res(1, 512)), isRateLimit(/tenant quota exceeded: memory_mib 512 of 1000 in use, 512 more requested/));
  });

  test("resume and fork count against the quota", async () => {
    const one = await tenantOf(stack, "quota-one", { sandboxes: 1 });
    const first = await create(one.apiKey);
    assert.equal(await first.pause(), true);
    // A paused (suspended) sandbox holds no slot: another takes it…
    const second = await create(one.apiKey);
    // …so neither a resume nor a fork fits now.
    await assert.rejects(Sandbox.connect(first.sandboxId, { ...base, apiKey: one.apiKey }), isRateLimit(/tenant quota exceeded: sandboxes 1 of 1/));
    // A fork over quota is refused before its capture: the whole request is the 429.
    await assert.rejects(Sandbox.fork(second.sandboxId, { ...base, apiKey: one.apiKey, count: 1, timeoutMs: 120_000 }), isRateLimit(/tenant quota exceeded: sandboxes 1 of 1/));
    await second.kill();
    const back = await Sandbox.connect(first.sandboxId, { ...base, apiKey: one.apiKey });
    created.push(back);
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
  });

  test("a create rate limit answers 429 with Retry-After from the bucket; the SDK waits it out; another tenant is unaffected", async () => {
    const slow = await tenantOf(stack, "rate-slow", { creates_per_s: 0.2, create_burst: 1 });
    await create(slow.apiKey);
    const raw = await rawCreate(stack, slow.apiKey);
    assert.equal(raw.status, 429, JSON.stringify(raw.body));
    assert.match(raw.body.message, /rate limit exceeded: 0\.2 creates per second per tenant \(burst 1\)/);
    const wait = Number(raw.retryAfter);
    assert.ok(Number.isInteger(wait) && wait >= 1 && wait <= 5, `Retry-After ${raw.retryAfter}`);
    await assert.rejects(create(slow.apiKey, { retries: 0 }), isRateLimit(/rate limit exceeded/));
    // Another tenant's bucket is its own.
    await create(stack.apiKey);
    await create(stack.apiKey);
    // With its default retries the SDK sleeps Retry-After and the create then goes through.
    const later = await create(slow.apiKey);
    assert.equal((await later.commands.run("echo later")).stdout, "later\n");
  });

  test("Native: a quota refusal fails the create operation at once naming the limit, no sandbox left; a rate limit is a synchronous 429 resource_exhausted with Retry-After", async () => {
    const one = await tenantOf(stack, "native-one", { sandboxes: 1, creates_per_s: 0.01, create_burst: 2 });
    const native = new NativeClient(stack.apiUrl, one.apiKey);
    const first = await native.create();
    const r = await native.req("POST", "/v1/sandboxes", { body: { template: "base", timeout_s: 120 } });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const op = await native.wait(r.body.id, 60_000);
    assert.equal(op.state, "failed");
    assert.deepEqual(op.failure, { code: "unavailable", message: "tenant quota exceeded: sandboxes 1 of 1" });
    const target = String(r.body.target).split("/").pop();
    assert.equal((await native.req("GET", `/v1/sandboxes/${target}`)).status, 404, "no sandbox row of the refused create");
    const limited = await native.req("POST", "/v1/sandboxes", { body: { template: "base", timeout_s: 120 } });
    assert.equal(limited.status, 429, JSON.stringify(limited.body));
    assert.equal(limited.body.reason, "resource_exhausted");
    assert.match(limited.body.message, /rate limit exceeded: 0\.01 creates per second per tenant \(burst 2\)/);
    assert.ok(Number(limited.headers.get("retry-after")) >= 1, String(limited.headers.get("retry-after")));
    assert.equal((await native.req("DELETE", `/v1/sandboxes/${first}`)).status, 202);
  });

  test("no node with room: 429 with Retry-After naming the resource (not 507)", async () => {
    // 1 TiB of memory: within the tenant quota (SPACE_QUOTA_MEMORY_MIB), beyond any node's memory
    // (docs/capacity.md: a memory limit larger than the node is refused there; a vCPU limit is not).
    const huge = { "space.resources": JSON.stringify({ memory_mib: 1_048_576 }) };
    const raw = await rawCreate(stack, stack.apiKey, huge);
    assert.equal(raw.status, 429, JSON.stringify(raw.body));
    assert.equal(raw.retryAfter, "2");
    assert.match(raw.body.message, /full \(memory\)/);
    await assert.rejects(create(stack.apiKey, { retries: 0, metadata: huge }), isRateLimit(/full \(memory\)/));
    // Logged once per refusal, at warn, without a stack trace; never at error. The log reaches
    // this process through the child's stdout pipe, which may trail the 429 it answered.
    const refusals = () => stack.output().split("\n").filter((l) => l.includes("1 node full (memory)"));
    await waitFor(async () => refusals().filter((l) => l.includes('"sandbox create refused: no capacity"')).length >= 2, "two refusals logged", 5000, 50).catch(() => undefined);
    const lines = refusals();
    assert.equal(lines.filter((l) => l.includes('"sandbox create refused: no capacity"')).length, 2, lines.join("\n"));
    assert.ok(lines.every((l) => l.includes('"level":40') && !l.includes('"stack"')), lines.join("\n"));
  });
});

describe("the rate limiter fails open when its database is down (e2b SDK)", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  const created: Sandbox[] = [];

  before(async () => {
    // A port nothing listens on: the limiter's store is unreachable from the start.
    const dead = await freePort();
    stack = await startStack({ env: { SPACE_RATE_LIMIT_DATABASE_URL: `postgres://space:space@127.0.0.1:${dead}/space` } });
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  test("creates go through a limit of one per 1000 s, and space_rate_limiter_fail_open_total moves", async () => {
    const t = await tenantOf(stack, "rate-fail-open", { creates_per_s: 0.001, create_burst: 1 });
    const before = await metricSum(stack.apiUrl, "space_rate_limiter_fail_open_total");
    const opts = { apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, apiKey: t.apiKey, requestTimeoutMs: 120_000, retries: 0 };
    for (let i = 0; i < 2; i++) created.push(await Sandbox.create("base", opts));
    assert.equal((await created[1]!.commands.run("echo open")).stdout, "open\n");
    const afterCount = await metricSum(stack.apiUrl, "space_rate_limiter_fail_open_total");
    assert.ok(afterCount - before >= 2, `fail-open counter moved ${before} → ${afterCount}`);
    assert.ok((stack.output().match(/fail open/g) ?? []).length <= 1, "logged once per interval, not per create");
  });
});
