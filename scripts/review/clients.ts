/**
 * The calls the review areas make as a client would: plain fetch on ECW (X-API-KEY),
 * Native (bearer) and envd through the gateway (E2B's routing headers), plus a command run
 * inside a sandbox through Native (output read back) and tenants made through Admin.
 */
import type { Endpoints } from "./review-stack.ts";

export interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the answers of the API under review are read loosely
  body: any;
  text: string;
}

export async function call(ep: Endpoints, method: string, path: string, o: { body?: unknown; bearer?: string; apiKey?: string; key?: string; timeoutMs?: number; retry?: boolean } = {}): Promise<Answer> {
  const headers: Record<string, string> = o.bearer !== undefined ? { authorization: `Bearer ${o.bearer}` } : { "x-api-key": o.apiKey ?? ep.apiKey };
  if (o.key) headers["idempotency-key"] = o.key;
  if (o.body !== undefined) headers["content-type"] = "application/json";
  const send = () =>
    fetch(ep.apiUrl + path, {
      method,
      headers,
      ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}),
      signal: AbortSignal.timeout(o.timeoutMs ?? 180_000),
    });
  // A keep-alive socket the server closed as the request went out: a request safe to repeat is sent again.
  const again = o.retry || o.key !== undefined || method === "GET" || method === "DELETE";
  const res = await send().catch((e: Error) => (again && /other side closed|ECONNRESET/.test(String(e.cause)) ? send() : Promise.reject(e)));
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body, text };
}

export interface EcwSandbox {
  sandboxID: string;
  envdAccessToken?: string;
}

/** Every sandbox id the review's creates got: the final leak count looks for each. */
export const createdIds = new Set<string>();

/** An ECW create (secure, so envd holds an access token); throws unless 201. */
export async function createEcw(ep: Endpoints, apiKey = ep.apiKey, timeout = 600): Promise<EcwSandbox> {
  const r = await call(ep, "POST", "/sandboxes", { apiKey, body: { templateID: "base", timeout, secure: true } });
  if (r.status !== 201) throw new Error(`ECW create: ${r.status} ${r.text.slice(0, 300)}`);
  createdIds.add((r.body as EcwSandbox).sandboxID);
  return r.body as EcwSandbox;
}

/** Kills every live sandbox of the tenant but `keep` (Native list, ECW kill) until none is left or `timeoutMs` passed; the ids it saw. */
export async function killAll(ep: Endpoints, timeoutMs = 60_000, keep: readonly string[] = []): Promise<string[]> {
  const seen: string[] = [];
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await call(ep, "GET", "/v1/sandboxes?limit=100", { bearer: ep.apiKey });
    if (r.status !== 200) throw new Error(`kill-all: listing answered ${r.status} ${r.text.slice(0, 200)}`);
    const live = ((r.body.sandboxes ?? []) as Array<{ id: string; state: string }>).filter((s) => !keep.includes(s.id));
    if (!live.length || Date.now() > end) return seen;
    for (const s of live) {
      seen.push(s.id);
      createdIds.add(s.id);
      await killEcw(ep, s.id);
    }
    await new Promise((res) => setTimeout(res, 500));
  }
}

export async function killEcw(ep: Endpoints, id: string, apiKey = ep.apiKey): Promise<number> {
  return (await call(ep, "DELETE", `/sandboxes/${id}`, { apiKey }).catch(() => ({ status: 0 }))).status;
}

/** Headers that route a request to a sandbox's envd through the gateway. */
export function envdHeaders(sb: EcwSandbox, extra: Record<string, string> = {}): Record<string, string> {
  return { "e2b-sandbox-id": sb.sandboxID, "e2b-sandbox-port": "49983", ...(sb.envdAccessToken ? { "x-access-token": sb.envdAccessToken } : {}), ...extra };
}

/** Waits for a Native operation to end; its final body. */
export async function waitOperation(ep: Endpoints, bearer: string, opId: string, timeoutMs = 180_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await call(ep, "GET", `/v1/operations/${opId}?wait=20s`, { bearer });
    if (r.status !== 200) throw new Error(`operation ${opId}: ${r.status} ${r.text.slice(0, 200)}`);
    if (r.body.state === "succeeded" || r.body.state === "failed") return r.body;
    if (Date.now() > end) throw new Error(`operation ${opId} still ${r.body.state}`);
  }
}

/** Runs `sh -c script` in the sandbox (Native commands); its exit code and stdout+stderr. */
export async function shell(ep: Endpoints, id: string, script: string, user = "root"): Promise<{ exit: number | null; out: string }> {
  const r = await call(ep, "POST", `/v1/sandboxes/${id}/commands`, { bearer: ep.apiKey, body: { cmd: "/bin/sh", args: ["-c", script], user, timeout_s: 120 } });
  if (r.status !== 202) throw new Error(`command: ${r.status} ${r.text.slice(0, 300)}`);
  await waitOperation(ep, ep.apiKey, r.body.id);
  const cid = String(r.body.target).split("/")[3];
  const cmd = await call(ep, "GET", `/v1/sandboxes/${id}/commands/${cid}`, { bearer: ep.apiKey });
  let out = "";
  for (let after = 0; ; ) {
    const p = await call(ep, "GET", `/v1/sandboxes/${id}/commands/${cid}/output?after=${after}&limit=1000`, { bearer: ep.apiKey });
    for (const c of p.body.chunks as Array<{ data: string }>) out += Buffer.from(c.data, "base64").toString();
    after = p.body.next_after;
    if (p.body.done || p.body.chunks.length === 0) break;
  }
  return { exit: cmd.body.exit_code as number | null, out };
}

/** A new tenant with an E2B API key and a Native token of every scope. */
export async function newTenant(ep: Endpoints, name: string): Promise<{ tenantId: string; apiKey: string; token: string }> {
  const admin = { bearer: ep.adminToken };
  const t = await call(ep, "POST", "/admin/api/v1/tenants", { ...admin, body: { name }, retry: true });
  if (t.status !== 201) throw new Error(`tenant: ${t.status} ${t.text}`);
  const apiKey = await newApiKey(ep, t.body.id, name);
  const tok = await call(ep, "POST", `/admin/api/v1/tenants/${t.body.id}/tokens`, { ...admin, body: { scopes: ["sandboxes:read", "sandboxes:write", "commands:exec", "templates:read", "templates:write"] } });
  if (tok.status !== 201) throw new Error(`token: ${tok.status} ${tok.text}`);
  return { tenantId: t.body.id, apiKey, token: tok.body.token };
}

/** A new API key of a tenant, made by the operator (the tenant's own keys may all be revoked). */
export async function newApiKey(ep: Endpoints, tenantId: string, name: string): Promise<string> {
  const k = await call(ep, "POST", `/admin/api/v1/tenants/${tenantId}/keys`, { bearer: ep.adminToken, body: { name }, retry: true });
  if (k.status !== 201) throw new Error(`api key: ${k.status} ${k.text}`);
  return k.body.key;
}
