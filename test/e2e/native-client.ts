/* eslint-disable @typescript-eslint/no-explicit-any -- JSON response bodies of the API under test are read loosely */
/**
 * A small HTTP client for the Native API in end-to-end tests (plain fetch, as any
 * caller would), plus admin helpers to make tenants and scoped tokens.
 */
import assert from "node:assert/strict";

export interface Res {
  status: number;
  body: any;
  headers: Headers;
}

export class NativeClient {
  constructor(
    readonly baseUrl: string,
    readonly token: string,
  ) {}

  as(token: string): NativeClient {
    return new NativeClient(this.baseUrl, token);
  }

  async req(method: string, path: string, o: { body?: unknown; key?: string; token?: string } = {}): Promise<Res> {
    const res = await fetch(this.baseUrl + path, {
      method,
      headers: {
        authorization: `Bearer ${o.token ?? this.token}`,
        ...(o.key ? { "idempotency-key": o.key } : {}),
        ...(o.body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}),
    });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* NDJSON or empty */
    }
    return { status: res.status, body, headers: res.headers };
  }

  /** Long-polls the operation until it ends. */
  async wait(opId: string, timeoutMs = 5 * 60_000): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const r = await this.req("GET", `/v1/operations/${opId}?wait=30s`);
      assert.equal(r.status, 200, JSON.stringify(r.body));
      if (r.body.state === "succeeded" || r.body.state === "failed") return r.body;
      if (Date.now() > deadline) throw new Error(`operation ${opId} still ${r.body.state} after ${timeoutMs} ms`);
    }
  }

  async create(body: Record<string, unknown> = {}): Promise<string> {
    const r = await this.req("POST", "/v1/sandboxes", { body: { template: "base", timeout_s: 600, ...body } });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const op = await this.wait(r.body.id);
    assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
    return op.result.id;
  }

  /** Runs a command to its end; returns the operation, the command and its output. */
  async run(sandboxId: string, body: Record<string, unknown>, key?: string): Promise<{ op: any; cmd: any; stdout: string; stderr: string }> {
    const r = await this.req("POST", `/v1/sandboxes/${sandboxId}/commands`, { body, ...(key ? { key } : {}) });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const op = await this.wait(r.body.id);
    const cid = String(r.body.target).split("/")[3];
    const cmd = (await this.req("GET", `/v1/sandboxes/${sandboxId}/commands/${cid}`)).body;
    const out = await this.output(sandboxId, cid!);
    return { op, cmd, ...out };
  }

  async output(sandboxId: string, cid: string): Promise<{ stdout: string; stderr: string }> {
    const parts: Record<string, Buffer[]> = { stdout: [], stderr: [], pty: [] };
    let after = 0;
    for (;;) {
      const p = await this.req("GET", `/v1/sandboxes/${sandboxId}/commands/${cid}/output?after=${after}&limit=1000`);
      assert.equal(p.status, 200, JSON.stringify(p.body));
      for (const c of p.body.chunks) parts[c.stream]!.push(Buffer.from(c.data, "base64"));
      after = p.body.next_after;
      if (p.body.done || p.body.chunks.length === 0) break;
    }
    return { stdout: Buffer.concat(parts.stdout!).toString(), stderr: Buffer.concat(parts.stderr!).toString() };
  }
}

/** Creates a tenant and a token with `scopes` through the admin API. */
export async function tenantWithToken(apiUrl: string, adminToken: string, name: string, scopes: string[]): Promise<{ tenantId: string; token: string }> {
  const h = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };
  const t = await fetch(`${apiUrl}/admin/api/v1/tenants`, { method: "POST", headers: h, body: JSON.stringify({ name }) });
  assert.equal(t.status, 201, await t.clone().text());
  const tenant = (await t.json()) as { id: string };
  return { tenantId: tenant.id, token: await tokenFor(apiUrl, adminToken, tenant.id, scopes) };
}

export async function tokenFor(apiUrl: string, adminToken: string, tenantId: string, scopes: string[]): Promise<string> {
  const r = await fetch(`${apiUrl}/admin/api/v1/tenants/${tenantId}/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ scopes }),
  });
  assert.equal(r.status, 201, await r.clone().text());
  return ((await r.json()) as { token: string }).token;
}

export const ALL = ["sandboxes:read", "sandboxes:write", "commands:exec"];

/** Why the Native e2e cannot run here, or false. */
export async function nativeSkipReason(apiUrl: string): Promise<string | false> {
  const r = await fetch(`${apiUrl}/v1/openapi.json`).catch(() => undefined);
  if (!r || r.status === 404) return "`space up` does not mount the Native API (/v1) yet";
  return false;
}
