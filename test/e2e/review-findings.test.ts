/**
 * What `npm run review` (scripts/review) found, kept as regression tests through the e2b
 * SDK and the wire: envd answered 500 `internal` (with Node's own message) for a path with
 * a NUL byte on its Connect filesystem RPCs and its HTTP files API, and 500 for an upload
 * whose gzip body is not gzip. Both are the client's mistake: `invalid_argument` / 400.
 * A JSON body nested 20 000 levels deep was a 500 on ECW and Native (the storable-input
 * walk recursed past the stack): 400 naming the depth.
 * And `space up` refused to start again (exit 1, "API key … already exists") once the
 * Admin API had revoked its default key or disabled the default tenant: a restart must
 * come up and leave the operator's revocation as it is.
 * Needs root (runc, network namespaces, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InvalidArgumentError, Sandbox, type ConnectionOpts } from "e2b";
import { adminRequest, removeDataDir, startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("review findings: envd refuses malformed paths and bodies as the client's error", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let sb: Sandbox;

  before(async () => {
    stack = await startStack();
    sb = await Sandbox.create("base", { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 } as ConnectionOpts & { sandboxUrl: string });
  });
  after(async () => {
    await sb?.kill().catch(() => undefined);
    await stack?.stop();
  });

  const invalid = (e: unknown) => e instanceof InvalidArgumentError && /NUL/.test(e.message) && !/Received|argument 'path'/.test(e.message);

  test("a NUL byte in a path: invalid_argument on the Connect RPCs (was internal)", async () => {
    await assert.rejects(sb.files.getInfo("a\0b"), invalid);
    await assert.rejects(sb.files.list("/tmp/\0"), invalid);
    await assert.rejects(sb.files.makeDir("/tmp/x\0y"), invalid);
    await assert.rejects(sb.files.watchDir("/tmp\0", () => undefined), invalid);
  });

  test("a NUL byte in a path: 400 on the HTTP files API (was 500)", async () => {
    await assert.rejects(sb.files.read("a\0b"), invalid);
    await assert.rejects(sb.files.write("/tmp/a\0b", "x"), invalid);
  });

  test("an upload whose body is not the gzip it claims: 400 (was 500), nothing written", async () => {
    const envd = sb as unknown as { envdApiUrl: string; envdAccessToken?: string };
    const headers: Record<string, string> = { "e2b-sandbox-id": sb.sandboxId, "e2b-sandbox-port": "49983", "content-type": "application/octet-stream", "content-encoding": "gzip" };
    if (envd.envdAccessToken) headers["x-access-token"] = envd.envdAccessToken;
    const r = await fetch(`${envd.envdApiUrl}/files?path=/tmp/not-gzip`, { method: "POST", headers, body: "not gzip at all" });
    const body = (await r.json()) as { message: string };
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.match(body.message, /gzip/);
    assert.equal(await sb.files.exists("/tmp/not-gzip"), false);
  });
});

describe("review findings: space up restarts after the Admin API revoked its default key or disabled its tenant", { skip, timeout: 10 * 60_000 }, () => {
  const dirs: string[] = [];
  after(() => dirs.forEach(removeDataDir));

  const ecwList = (s: Stack) => fetch(`${s.apiUrl}/v2/sandboxes`, { headers: { "x-api-key": s.apiKey } }).then((r) => r.status);

  for (const how of ["revoke the default key", "disable the default tenant"] as const) {
    test(`${how}, stop, start again on the same data directory: it comes up, the revocation stays`, async () => {
      const dataDir = mkdtempSync(join(tmpdir(), "space-e2e-bootstrap-"));
      dirs.push(dataDir);
      const first = await startStack({ dataDir });
      try {
        assert.equal(await ecwList(first), 200);
        const tenant = ((await adminRequest(first, "GET", "/tenants")).body.tenants as Array<{ id: string; name: string }>).find((t) => t.name === "default")!;
        if (how === "revoke the default key") {
          const keys = (await adminRequest(first, "GET", `/tenants/${tenant.id}/keys`)).body.keys as Array<{ id: string; name: string }>;
          const key = keys.find((k) => k.name === "default")!;
          assert.ok((await adminRequest(first, "DELETE", `/tenants/${tenant.id}/keys/${key.id}`)).status < 300);
        } else {
          assert.equal((await adminRequest(first, "POST", `/tenants/${tenant.id}/disable`)).status, 200);
        }
        assert.equal(await ecwList(first), 401);
      } finally {
        await first.stop();
      }
      const again = await startStack({ dataDir, startTimeoutMs: 120_000 });
      try {
        assert.equal(again.apiKey, first.apiKey, "the same data directory, the same printed key");
        assert.equal(await ecwList(again), 401, "the operator's revocation is not undone by a restart");
        assert.equal((await adminRequest(again, "GET", "/tenants")).status, 200, "the stack serves");
      } finally {
        await again.stop();
      }
    });
  }
});

describe("review findings: a JSON body nested too deep", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack?.stop();
  });

  test("20 000 levels of arrays or objects: 400 naming the depth on ECW, Native and Admin (was 500)", async () => {
    const deepArray = `${"[".repeat(20_000)}${"]".repeat(20_000)}`;
    const deepObject = `{"templateID":"base","metadata":${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}}`;
    const cases: Array<[string, Record<string, string>, string]> = [
      ["/sandboxes", { "x-api-key": stack.apiKey }, deepArray],
      ["/sandboxes", { "x-api-key": stack.apiKey }, deepObject],
      ["/v1/sandboxes", { authorization: `Bearer ${stack.apiKey}` }, deepArray],
      ["/admin/api/v1/tenants", { authorization: `Bearer ${stack.adminToken}` }, deepObject],
    ];
    for (const [path, auth, body] of cases) {
      const r = await fetch(stack.apiUrl + path, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body });
      const text = await r.text();
      assert.equal(r.status, 400, `${path}: ${text}`);
      assert.match(text, /nested deeper than 64 levels/, path);
    }
    // An ordinary body still passes the guard.
    const ok = await fetch(`${stack.apiUrl}/admin/api/v1/tenants`, { method: "POST", headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" }, body: '{"name":"deep-ok"}' });
    assert.equal(ok.status, 201, await ok.text());
  });
});
