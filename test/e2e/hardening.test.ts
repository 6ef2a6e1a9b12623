/**
 * Hardening (issue 27) end to end, on the real stack: malformed input the review found
 * (NUL bytes, unbounded sizes, protocol edges) answered 400 naming the field, never a 5xx
 * and never database text; envd's file API with the caller's rights; envd out of the
 * sandbox root's reach (no ptrace, no /proc/1/mem); a second node on the host leaving
 * this node's veths alone. Kept as regression tests for the review's ECW, Native, Admin
 * and envd cases. Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileType, InvalidArgumentError, Sandbox, SandboxError, type ConnectionOpts } from "e2b";
import { LIMITS } from "../../src/core/limits.ts";
import { createLogger } from "../../src/core/log.ts";
import { LinuxNetworkSlots } from "../../src/node/network/slots.ts";
import { pickSlotRange, removeNodeNetwork } from "../support/node-network-cleanup.ts";
import { hostScopeFor, startStack, type Stack } from "../support/stack.ts";
import type { Res } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

/** No 5xx, no Postgres text, and the message names `field`. */
function assertRefused(r: Res, field: string | RegExp, status = 400): void {
  const text = JSON.stringify(r.body);
  assert.equal(r.status, status, text);
  assert.doesNotMatch(text, /0x00|UTF8|Unicode escape|invalid byte sequence/i, "no database text");
  assert.match(String(r.body.message), field instanceof RegExp ? field : new RegExp(field.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")), text);
}

/** What the e2b SDK throws for an API 400 (it keeps the status): the message names `field`. */
const badRequest = (field: RegExp) => (e: unknown) => e instanceof SandboxError && (e as SandboxError & { statusCode?: number }).statusCode === 400 && field.test(e.message);

describe("hardening: malformed input, limits, protocol edges, file rights", { skip, timeout: 15 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];

  /** One request as any HTTP client sends it; `body` as given (a string is sent raw). */
  const call = async (method: string, path: string, o: { body?: unknown; raw?: string; admin?: boolean; native?: boolean; contentType?: string } = {}): Promise<Res> => {
    const headers: Record<string, string> = o.admin
      ? { authorization: `Bearer ${stack.adminToken}` }
      : o.native
        ? { authorization: `Bearer ${stack.apiKey}` }
        : { "x-api-key": stack.apiKey };
    const body = o.raw ?? (o.body !== undefined ? JSON.stringify(o.body) : undefined);
    if (body !== undefined || o.contentType) headers["content-type"] = o.contentType ?? "application/json";
    const res = await fetch(stack.apiUrl + path, { method, headers, ...(body !== undefined ? { body } : {}) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  describe("NUL bytes and unpaired surrogates: 400 naming the field, never database text", () => {
    test("ECW create: templateID, metadata value and key, envVars", async () => {
      assertRefused(await call("POST", "/v2/sandboxes", { raw: '{"templateID":"base\\u0000"}' }), "templateID");
      assertRefused(await call("POST", "/v2/sandboxes", { raw: '{"templateID":"base","metadata":{"a":"x\\u0000"}}' }), "metadata.a");
      assertRefused(await call("POST", "/v2/sandboxes", { raw: '{"templateID":"base","metadata":{"a\\u0000":"x"}}' }), "metadata");
      assertRefused(await call("POST", "/v2/sandboxes", { raw: '{"templateID":"base","envVars":{"A":"\\u0000"}}' }), "envVars.A");
      assertRefused(await call("POST", "/v2/sandboxes", { raw: '{"templateID":"base","metadata":{"a":"\\ud800"}}' }), "metadata.a");
    });

    test("the e2b SDK sees a 400 naming the field, not a server error", async () => {
      await assert.rejects(Sandbox.create("base\0", opts), badRequest(/templateID/));
      await assert.rejects(Sandbox.create({ ...opts, envs: { A: "x\0y" } }), badRequest(/envVars\.A/));
      await assert.rejects(Sandbox.getInfo("\0", opts), badRequest(/sandboxID/));
    });

    test("ECW get, kill, list filter", async () => {
      assertRefused(await call("GET", "/sandboxes/%00"), "sandboxID");
      assertRefused(await call("DELETE", "/sandboxes/%00"), "sandboxID");
      assertRefused(await call("GET", "/v2/sandboxes?metadata=a%3D%2500"), "metadata");
      assertRefused(await call("GET", "/v2/sandboxes?metadata=a%00%3Db"), "metadata");
      assertRefused(await call("GET", "/sandboxes?metadata=a%3D%2500"), "metadata");
    });

    test("Native get sandbox and operation, create, fork, commands; Admin get tenant", async () => {
      assertRefused(await call("GET", "/v1/sandboxes/%00", { native: true }), "id");
      assertRefused(await call("GET", "/v1/operations/%00", { native: true }), "id");
      assertRefused(await call("POST", "/v1/sandboxes", { native: true, raw: '{"metadata":{"a":"\\u0000"}}' }), "metadata.a");
      assertRefused(await call("POST", "/v1/sandboxes", { native: true, raw: '{"template":"b\\u0000"}' }), "template");
      assertRefused(await call("POST", "/v1/sandboxes/%00/fork", { native: true, body: {} }), "id");
      assertRefused(await call("POST", "/v1/sandboxes/sbx/commands", { native: true, raw: '{"cmd":"echo\\u0000"}' }), "cmd");
      assertRefused(await call("GET", "/admin/api/v1/tenants/%00", { admin: true }), "id");
    });
  });

  describe("size limits: 400 naming the limit", () => {
    test("metadata: entries, key and value bytes, total", async () => {
      const many = Object.fromEntries(Array.from({ length: LIMITS.metadata.maxEntries + 1 }, (_, i) => [`k${i}`, "v"]));
      assertRefused(await call("POST", "/v2/sandboxes", { body: { templateID: "base", metadata: many } }), `at most ${LIMITS.metadata.maxEntries}`);
      assertRefused(await call("POST", "/v1/sandboxes", { native: true, body: { metadata: many } }), `at most ${LIMITS.metadata.maxEntries}`);
      const bigValue = { a: "x".repeat(LIMITS.metadata.maxValueBytes + 1) };
      assertRefused(await call("POST", "/v2/sandboxes", { body: { templateID: "base", metadata: bigValue } }), "metadata.a");
      const bigKey = { ["k".repeat(LIMITS.metadata.maxKeyBytes + 1)]: "v" };
      assertRefused(await call("POST", "/v2/sandboxes", { body: { templateID: "base", metadata: bigKey } }), "metadata");
      const total = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`k${i}`, "x".repeat(LIMITS.metadata.maxValueBytes)]));
      assertRefused(await call("POST", "/v2/sandboxes", { body: { templateID: "base", metadata: total } }), `${LIMITS.metadata.maxTotalBytes} bytes`);
      // The SDK's own path: 10 MiB of metadata is refused before anything is stored.
      await assert.rejects(Sandbox.create({ ...opts, metadata: { a: "x".repeat(10 * 1024 * 1024) } }), badRequest(/metadata/));
    });

    test("env vars: a 200 KiB value and too much in total are 400 (not E2BIG at exec)", async () => {
      await assert.rejects(Sandbox.create({ ...opts, envs: { BIG: "x".repeat(200 * 1024) } }), badRequest(/envVars\.BIG/));
      // A command's own env and argv reach exec through envd: too long is invalid_argument there too.
      const sb = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
      created.push(sb);
      await assert.rejects(sb.commands.run("true", { envs: { BIG: "x".repeat(200 * 1024) } }), (e: unknown) => e instanceof InvalidArgumentError && /E2BIG/.test(e.message));
      await assert.rejects(sb.commands.run(`true ${"y".repeat(200 * 1024)}`), (e: unknown) => e instanceof InvalidArgumentError && /E2BIG/.test(e.message));
      assert.equal((await sb.commands.run("echo fine")).stdout, "fine\n");
      const total = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`E${i}`, "x".repeat(LIMITS.envVars.maxValueBytes)]));
      assertRefused(await call("POST", "/v2/sandboxes", { body: { templateID: "base", envVars: total } }), `${LIMITS.envVars.maxTotalBytes} bytes`);
      assertRefused(await call("POST", "/v1/sandboxes", { native: true, body: { env: total } }), `${LIMITS.envVars.maxTotalBytes} bytes`);
      assertRefused(
        await call("POST", "/v1/sandboxes/sbx/commands", { native: true, body: { cmd: "true", args: Array.from({ length: 20 }, () => "x".repeat(100 * 1024)) } }),
        `${LIMITS.command.maxArgsBytes} bytes`,
      );
    });

    test("timeout 0 or beyond 24 h is 400, on create, timeout, connect", async () => {
      assertRefused(await call("POST", "/v2/sandboxes", { body: { templateID: "base", timeout: 0 } }), "timeout");
      assertRefused(await call("POST", "/sandboxes", { body: { templateID: "base", timeout: LIMITS.timeoutSec.max + 1 } }), "timeout");
      assertRefused(await call("POST", "/v1/sandboxes", { native: true, body: { timeout_s: 0 } }), "timeout_s");
      const sb = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
      created.push(sb);
      assertRefused(await call("POST", `/sandboxes/${sb.sandboxId}/timeout`, { body: { timeout: 0 } }), "timeout");
      assertRefused(await call("POST", `/sandboxes/${sb.sandboxId}/connect`, { body: { timeout: 0 } }), "timeout");
      assert.equal(await sb.isRunning(), true, "a refused timeout leaves the sandbox alone");
    });
  });

  test("envd's file API runs with the requesting user's rights", async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
    created.push(sb);
    const denied = (e: unknown) => e instanceof SandboxError && /permission denied|403/i.test(e.message);
    const asUser = { user: "user" } as const;
    // What `cat` as user is refused, the file API refuses too.
    assert.notEqual((await sb.commands.run("cat /etc/shadow", { ...asUser }).catch((e: { exitCode?: number }) => e)).exitCode, 0);
    await assert.rejects(sb.files.read("/etc/shadow", asUser), denied);
    await assert.rejects(sb.files.write("/root/x", "no", asUser), denied);
    await assert.rejects(sb.files.makeDir("/root/d", asUser), denied);
    await assert.rejects(sb.files.list("/root", asUser), denied);
    await assert.rejects(sb.files.remove("/etc/hostname", asUser), denied);
    await assert.rejects(sb.files.rename("/etc/hostname", "/home/user/h", asUser), denied);
    await assert.rejects(sb.files.getInfo("/root/.bashrc", asUser), denied);
    assert.equal((await sb.commands.run("test ! -e /root/x && test ! -e /root/d && echo clean", { user: "root" })).stdout, "clean\n");
    // The user's own files work, and are the user's.
    await sb.files.write("/home/user/sub/own.txt", "mine", asUser);
    assert.equal(await sb.files.read("/home/user/sub/own.txt", asUser), "mine");
    const info = await sb.files.getInfo("/home/user/sub/own.txt", asUser);
    assert.deepEqual([info.owner, info.group], ["user", "user"]);
    assert.equal((await sb.commands.run("stat -c %U /home/user/sub", { user: "root" })).stdout, "user\n");
    await sb.files.rename("/home/user/sub/own.txt", "/home/user/sub/moved.txt", asUser);
    assert.deepEqual((await sb.files.list("/home/user/sub", asUser)).map((e) => e.name), ["moved.txt"]);
    await sb.files.remove("/home/user/sub", asUser);
    // Root keeps root's rights.
    await sb.files.write("/root/x", "root's", { user: "root" });
    assert.match(await sb.files.read("/etc/shadow", { user: "root" }), /^root:/);
  });

  test("envd (PID 1) is out of the sandbox root's reach: no ptrace attach, no /proc/1/mem or /proc/1/environ, no token", async () => {
    const sb = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
    created.push(sb);
    const token = (sb as unknown as { envdAccessToken?: string }).envdAccessToken;
    assert.ok(token, "the sandbox is secure: envd holds an access token");
    const asRoot = (cmd: string) => sb.commands.run(cmd, { user: "root" }).then((r) => r.stdout.trim());
    assert.equal(await asRoot("id -u"), "0");
    assert.equal(await asRoot("sh -c 'exec 3</proc/1/mem' 2>/dev/null && echo open || echo denied"), "denied", "/proc/1/mem");
    assert.equal(await asRoot("sh -c 'exec 3</proc/1/environ' 2>/dev/null && echo open || echo denied"), "denied", "/proc/1/environ");
    // PTRACE_ATTACH (16) is refused (EPERM); were it not, PTRACE_DETACH (17) lets envd go on.
    const attach = await asRoot(
      `python3 -c "import ctypes; l=ctypes.CDLL(None, use_errno=True); r=l.ptrace(16,1,0,0); e=ctypes.get_errno(); r==0 and l.ptrace(17,1,0,0); print(r, e)"`,
    );
    assert.equal(attach, "-1 1", "ptrace attach to PID 1: -1 EPERM");
    // Nothing envd exposes to everyone carries the token.
    const visible = await asRoot("cat /proc/1/cmdline /proc/1/status 2>/dev/null | tr '\\0' ' '; cat /proc/1/environ 2>/dev/null | tr '\\0' ' '; true");
    assert.ok(!visible.includes(token), "no token in what PID 1 exposes");
    // envd itself is unaffected.
    assert.match(await sb.files.read("/etc/shadow", { user: "root" }), /^root:/);
    // A restored envd (CRIU keeps the flag) is just as closed.
    await sb.pause();
    const again = await Sandbox.connect(sb.sandboxId, opts);
    assert.equal((await again.commands.run("sh -c 'exec 3</proc/1/mem' 2>/dev/null && echo open || echo denied", { user: "root" })).stdout.trim(), "denied", "after a restore");
  });

  test("a second node with the same veth prefix and its own bridge leaves this node's links alone", { skip: process.env.SPACE_E2E_STACK ? "needs the stack's data dir (its host scope)" : false }, async () => {
    // Only this test's sandbox on the node: none of the earlier ones times out mid-test.
    await Promise.allSettled(created.splice(0).map((s) => s.kill()));
    const sb = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
    created.push(sb);
    const prefix = hostScopeFor(stack.dataDir).SPACE_NODE_VETH_PREFIX!;
    const linksNamed = (re: RegExp) =>
      (JSON.parse(spawnSync("ip", ["-j", "link", "show"], { encoding: "utf8" }).stdout) as Array<{ ifname: string }>).map((l) => l.ifname).filter((n) => re.test(n)).sort();
    const ours = () => linksNamed(new RegExp(`^${prefix}\\d+$`));
    const before = ours();
    assert.ok(before.length > 0, "the stack's sandboxes have host veths");
    // Another agent on this host, given the same veth prefix but its own bridge, table and range.
    const tag = randomBytes(3).toString("hex");
    const bridge = `sf${tag}`;
    const foreign = new LinuxNetworkSlots({
      cidr: pickSlotRange(bridge, bridge),
      maxSlots: 4,
      bridge,
      nftTable: `space_f${tag}`,
      vethPrefix: prefix,
      stateDir: mkdtempSync(join(tmpdir(), "space-foreign-slots-")),
      pool: { target: 0, retainReady: 0, minReady: 0 },
      logger: createLogger("warn", "foreign-node"),
    });
    const orphan = `${prefix}199`;
    try {
      await foreign.init(() => false, AbortSignal.timeout(60_000));
      assert.deepEqual(ours(), before, "the other agent's start deleted none of this node's veths");
      assert.equal((await sb.commands.run("echo still reachable")).stdout, "still reachable\n");
      // It still reclaims an orphan of its own: a prefixed veth on its bridge with no slot.
      assert.equal(spawnSync("ip", ["link", "add", orphan, "type", "veth", "peer", "name", `${prefix}p199`]).status, 0);
      assert.equal(spawnSync("ip", ["link", "set", orphan, "master", bridge]).status, 0);
      await foreign.init(() => false, AbortSignal.timeout(60_000));
      assert.deepEqual(linksNamed(new RegExp(`^${orphan}$`)), [], "its own orphan is gone");
      assert.deepEqual(ours(), before);
    } finally {
      spawnSync("ip", ["link", "delete", orphan]);
      removeNodeNetwork({ bridge, nftTable: `space_f${tag}` });
    }
  });

  describe("protocol edges", () => {
    test("POST /v1/sandboxes with no body, and a null body anywhere, are 400", async () => {
      assertRefused(await call("POST", "/v1/sandboxes", { native: true }), "body");
      assertRefused(await call("POST", "/v1/sandboxes", { native: true, contentType: "application/json" }), "body");
      assertRefused(await call("POST", "/v1/sandboxes/sbx/stop", { native: true, raw: "null" }), "body");
      assertRefused(await call("POST", "/v1/sandboxes/sbx/fork", { native: true, raw: "null" }), "body");
      assertRefused(await call("POST", "/v2/sandboxes", { raw: "null" }), "body");
    });

    test("unsupported methods answer 405 with Allow", async () => {
      const put = await call("PUT", "/v1/sandboxes", { native: true, body: {} });
      assert.equal(put.status, 405, JSON.stringify(put.body));
      assert.deepEqual(put.headers.get("allow")?.split(/,\s*/).sort(), ["GET", "HEAD", "POST"]);
      const patch = await call("PATCH", "/sandboxes/abc");
      assert.equal(patch.status, 405, JSON.stringify(patch.body));
      assert.match(patch.headers.get("allow") ?? "", /DELETE/);
      const admin = await call("DELETE", "/admin/api/v1/tenants", { admin: true });
      assert.equal(admin.status, 405, JSON.stringify(admin.body));
      assert.equal((await call("GET", "/v1/nothing-here", { native: true })).status, 404, "an unknown path stays 404");
    });

    test("the OpenAPI document lists the 400 of an unknown cursor", async () => {
      assertRefused(await call("GET", "/v1/sandboxes?cursor=zzz", { native: true }), "cursor");
      const doc = (await call("GET", "/v1/openapi.json")).body;
      for (const path of ["/v1/sandboxes", "/v1/operations"]) {
        const get = doc.paths[path].get;
        assert.ok(get.responses["400"], `${path} GET documents 400: ${JSON.stringify(Object.keys(get.responses))}`);
        assert.match(JSON.stringify(get.responses["400"]), /cursor/);
      }
    });

    test("envd: a unary call with garbage protobuf is invalid_argument (HTTP 400), not internal", async () => {
      const sb = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
      created.push(sb);
      const envd = sb as unknown as { envdApiUrl: string; envdAccessToken?: string };
      const headers: Record<string, string> = { "content-type": "application/proto", "e2b-sandbox-id": sb.sandboxId, "e2b-sandbox-port": "49983" };
      if (envd.envdAccessToken) headers["x-access-token"] = envd.envdAccessToken;
      for (const path of ["/filesystem.Filesystem/Stat", "/process.Process/List"]) {
        const r = await fetch(`${envd.envdApiUrl}${path}`, { method: "POST", headers, body: new Uint8Array([0xff, 0xff, 0xff, 0x07, 0x01]) });
        const body = (await r.json()) as { code: string };
        assert.deepEqual([r.status, body.code], [400, "invalid_argument"], `${path}: ${JSON.stringify(body)}`);
      }
      // A well-formed call still works afterwards.
      assert.equal((await sb.files.getInfo("/etc")).type, FileType.DIR);
    });
  });
});
