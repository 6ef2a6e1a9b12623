/* eslint-disable @typescript-eslint/no-explicit-any -- JSON response bodies of the API under test are read loosely */
/**
 * A tenant's own API keys and tokens over the Native API (`/v1/api-keys`, `/v1/tokens`)
 * against the real stack (`space up`): list, create (the secret once), revoke (refused at
 * once); another tenant's id is 404; a token cannot grant itself more (scopes, lifetime).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { adminRequest, startStack, type Stack } from "../support/stack.ts";
import { NativeClient, tenantWithToken, tokenFor } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("Native credentials end to end", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  /** Tenant A through its API key (the tenant's full power), and B through a token. */
  let a: NativeClient;
  let b: NativeClient;
  let tenantA: string;
  let tenantB: string;
  /** ECW's list with an API key: 200 while it is live. */
  const ecwList = (key: string) => fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": key } }).then((r) => r.status);

  before(async () => {
    stack = await startStack();
    const ta = await tenantWithToken(stack.apiUrl, stack.adminToken, "cred-a", ["sandboxes:read"]);
    tenantA = ta.tenantId;
    const key = await adminRequest(stack, "POST", `/tenants/${tenantA}/keys`, { name: "root" });
    assert.equal(key.status, 201);
    a = new NativeClient(stack.apiUrl, String(key.body.key));
    const tb = await tenantWithToken(stack.apiUrl, stack.adminToken, "cred-b", ["credentials:read", "credentials:write", "sandboxes:read"]);
    tenantB = tb.tenantId;
    b = new NativeClient(stack.apiUrl, tb.token);
  });
  after(async () => {
    await stack?.stop();
  });

  test("an API key lists, creates and revokes its tenant's keys; the new secret works at once and is refused at once after", async () => {
    const made = await a.req("POST", "/v1/api-keys", { body: { name: "ci" } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.match(made.body.key, /^e2b_[0-9a-f]{40}$/);
    assert.equal(made.body.prefix, made.body.key.slice(0, 10));
    assert.equal(made.body.name, "ci");
    assert.equal(made.body.revoked_at, null);
    assert.equal(await ecwList(made.body.key), 200);

    const list = await a.req("GET", "/v1/api-keys");
    assert.equal(list.status, 200);
    const row = list.body.api_keys.find((k: any) => k.id === made.body.id);
    assert.ok(row, JSON.stringify(list.body));
    assert.deepEqual(Object.keys(row).sort(), ["created_at", "id", "last_used_at", "name", "prefix", "revoked_at"], "a listed key has no secret");
    assert.ok(row.last_used_at, "last use recorded");
    assert.ok(!JSON.stringify(list.body).includes(made.body.key));

    const del = await a.req("DELETE", `/v1/api-keys/${made.body.id}`);
    assert.equal(del.status, 204);
    assert.equal(await ecwList(made.body.key), 401, "refused at once");
    assert.equal((await a.req("GET", "/v1/api-keys", { token: made.body.key })).status, 401);
    const after = (await a.req("GET", "/v1/api-keys")).body.api_keys.find((k: any) => k.id === made.body.id);
    assert.ok(after.revoked_at);
  });

  test("tokens: created with their scopes and expiry, listed, revoked at once", async () => {
    const made = await a.req("POST", "/v1/tokens", { body: { name: "reader", scopes: ["sandboxes:read"], expires_in_s: 3600 } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.match(made.body.token, /^spt_/);
    assert.deepEqual(made.body.scopes, ["sandboxes:read"]);
    const ttl = Date.parse(made.body.expires_at) - Date.now();
    assert.ok(ttl > 3500_000 && ttl <= 3600_000, `expires in ${ttl} ms`);
    const reader = a.as(made.body.token);
    assert.equal((await reader.req("GET", "/v1/sandboxes")).status, 200);
    const denied = await reader.req("GET", "/v1/tokens");
    assert.equal(denied.status, 403);
    assert.match(denied.body.message, /credentials:read/);

    const list = await a.req("GET", "/v1/tokens");
    const row = list.body.tokens.find((t: any) => t.id === made.body.id);
    assert.equal(row.name, "reader");
    assert.equal(row.token, undefined);
    assert.equal((await a.req("DELETE", `/v1/tokens/${made.body.id}`)).status, 204);
    assert.equal((await reader.req("GET", "/v1/sandboxes")).status, 401, "refused at once");
  });

  test("another tenant's key or token is 404 to revoke and absent from the list; it stays valid", async () => {
    const bKey = await adminRequest(stack, "POST", `/tenants/${tenantB}/keys`, { name: "b-key" });
    assert.equal(bKey.status, 201);
    const bToken = (await b.req("GET", "/v1/tokens")).body.tokens[0];
    for (const [path, id] of [["/v1/api-keys", bKey.body.id], ["/v1/tokens", bToken.id], ["/v1/tokens", "tk_nothing"]] as const) {
      const r = await a.req("DELETE", `${path}/${id}`);
      assert.equal(r.status, 404, `${path}/${id}: ${JSON.stringify(r.body)}`);
    }
    assert.ok(!(await a.req("GET", "/v1/api-keys")).body.api_keys.some((k: any) => k.id === bKey.body.id));
    assert.ok(!(await a.req("GET", "/v1/tokens")).body.tokens.some((t: any) => t.id === bToken.id));
    assert.equal(await ecwList(String(bKey.body.key)), 200);
    assert.equal((await b.req("GET", "/v1/tokens")).status, 200);
  });

  test("a token grants only its own scopes, never admin, with a required, bounded expiry; it cannot make an API key", async () => {
    const up = await b.req("POST", "/v1/tokens", { body: { scopes: ["sandboxes:read", "sandboxes:write"], expires_in_s: 60 } });
    assert.equal(up.status, 403, JSON.stringify(up.body));
    assert.match(up.body.message, /missing scope sandboxes:write/);
    const adm = await b.req("POST", "/v1/tokens", { body: { scopes: ["admin"], expires_in_s: 60 } });
    assert.equal(adm.status, 400, JSON.stringify(adm.body));
    assert.match(adm.body.message, /scopes/);
    const forever = await b.req("POST", "/v1/tokens", { body: { scopes: ["sandboxes:read"] } });
    assert.equal(forever.status, 400);
    assert.match(forever.body.message, /expires_in_s/);
    const key = await b.req("POST", "/v1/api-keys", { body: {} });
    assert.equal(key.status, 403);
    assert.match(key.body.message, /missing scope .*sandboxes:write/);

    // A subset, for a while: made. What it makes cannot outlive it.
    const sub = await b.req("POST", "/v1/tokens", { body: { scopes: ["sandboxes:read", "credentials:write"], expires_in_s: 600 } });
    assert.equal(sub.status, 201, JSON.stringify(sub.body));
    const child = b.as(sub.body.token);
    const longer = await child.req("POST", "/v1/tokens", { body: { scopes: ["sandboxes:read"], expires_in_s: 3600 } });
    assert.equal(longer.status, 400);
    assert.match(longer.body.message, /expires_in_s: must be at most/);
    const shorter = await child.req("POST", "/v1/tokens", { body: { scopes: ["sandboxes:read"], expires_in_s: 300 } });
    assert.equal(shorter.status, 201, JSON.stringify(shorter.body));
  });

  test("bad input is 400 naming the field; no credential is 401; a read-only token cannot create", async () => {
    for (const [path, body, field] of [
      ["/v1/api-keys", { name: "x".repeat(101) }, "name"],
      ["/v1/api-keys", { bogus: 1 }, "bogus"],
      ["/v1/tokens", { scopes: [] }, "scopes"],
      ["/v1/tokens", { scopes: ["sandboxes:nope"] }, "scopes"],
      ["/v1/tokens", { scopes: ["sandboxes:read"], expires_in_s: -5 }, "expires_in_s"],
    ] as const) {
      const r = await a.req("POST", path, { body });
      assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.message, new RegExp(field));
    }
    assert.equal((await fetch(`${stack.apiUrl}/v1/api-keys`)).status, 401);
    const ro = a.as(await tokenFor(stack.apiUrl, stack.adminToken, tenantA, ["credentials:read"]));
    assert.equal((await ro.req("GET", "/v1/api-keys")).status, 200);
    const w = await ro.req("POST", "/v1/tokens", { body: { scopes: ["credentials:read"], expires_in_s: 60 } });
    assert.equal(w.status, 403);
    assert.match(w.body.message, /credentials:write/);
    const admin = await new NativeClient(stack.apiUrl, stack.adminToken).req("GET", "/v1/api-keys");
    assert.equal(admin.status, 400, "the admin token has no tenant");
  });

  test("the OpenAPI document lists the credential routes with their scopes", async () => {
    const doc = (await (await fetch(`${stack.apiUrl}/v1/openapi.json`)).json()) as any;
    assert.equal(doc.paths["/v1/api-keys"].post["x-required-scope"], "credentials:write");
    assert.ok(doc.paths["/v1/tokens/{id}"].delete.responses["204"]);
    assert.ok(doc.components.schemas.CreateToken.properties.expires_in_s);
  });
});

