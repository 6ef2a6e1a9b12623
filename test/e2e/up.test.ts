/**
 * The foundation as a user meets it: `space up` starts, answers health/readiness/metrics,
 * refuses a second start on the same data directory, keeps its tenant and key across a
 * restart, and refuses bad configuration with the variable, value and allowed values.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { isTmpfs } from "../../src/core/tmpfs.ts";
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { removeDataDir, startStack } from "../support/stack.ts";

const space = (args: string[], env: Record<string, string>) =>
  spawnSync(process.execPath, [resolve("bin/space.mjs"), ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/root", ...env },
    encoding: "utf8",
    timeout: 60_000,
  });

test("bad configuration stops startup naming the variable, the value and what is allowed", () => {
  const r = space(["up"], { SPACE_SUBSTRATE: "Direct", SPACE_DATA_DIR: "/nonexistent-space-test" });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /SPACE_SUBSTRATE="Direct" is invalid: expected one of direct\|kubernetes/);
  const p = space(["up"], { SPACE_API_PORT: "http", SPACE_DATA_DIR: "/nonexistent-space-test" });
  assert.equal(p.status, 2);
  assert.match(p.stderr, /SPACE_API_PORT="http"/);
});

test("space version and space config answer without starting anything", () => {
  const v = space(["version"], {});
  assert.equal(v.status, 0);
  assert.match(v.stdout, /^space \d+\.\d+\.\d+/);
  const c = space(["config"], {});
  assert.equal(c.status, 0);
  assert.match(c.stdout, /SPACE_DATABASE_URL=/);
  assert.match(c.stdout, /SPACE_SUBSTRATE=direct/);
});

test("space up: health, metrics, lock, admin, and a restart that keeps tenant and key", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), "space-up-"));
  t.after(() => removeDataDir(dataDir));
  let stack = await startStack({ dataDir });
  try {
    const health = await fetch(`${stack.apiUrl}/health`);
    assert.equal(health.status, 200);
    const ready = await fetch(`${stack.apiUrl}/ready`);
    assert.equal(ready.status, 200);
    const metrics = await (await fetch(`${stack.apiUrl}/metrics`)).text();
    assert.match(metrics, /space_api_requests_total/);
    assert.match(metrics, /process_cpu_seconds_total/);

    // A second `space up` on the same directory is refused while the first runs.
    const second = space(["up"], { SPACE_DATA_DIR: dataDir, SPACE_API_PORT: "0", SPACE_GATEWAY_PORT: "0", SPACE_NODE_PORT: "0" });
    assert.notEqual(second.status, 0);
    assert.match(second.stderr, /in use by another SPACE process/);

    const admin = { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" };
    assert.equal((await fetch(`${stack.apiUrl}/admin/api/v1/tenants`)).status, 401);
    const bad = await fetch(`${stack.apiUrl}/admin/api/v1/tenants`, { method: "POST", headers: admin, body: JSON.stringify({ name: "" }) });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /name/);
    const created = await fetch(`${stack.apiUrl}/admin/api/v1/tenants`, { method: "POST", headers: admin, body: JSON.stringify({ name: "acme" }) });
    assert.equal(created.status, 201);

    const firstKey = stack.apiKey;
    await stack.stop();
    stack = await startStack({ dataDir });
    assert.equal(stack.apiKey, firstKey, "the default API key survives a restart");
    // What lives as long as the host's boot is on tmpfs mounts of the node's own, kept across its restart.
    for (const d of [join(dataDir, "node", "bundles"), join(dataDir, "node", "slots"), join(dataDir, "runc")]) assert.equal(await isTmpfs(d), true, d);
    const list = (await (await fetch(`${stack.apiUrl}/admin/api/v1/tenants`, { headers: admin })).json()) as { tenants: Array<{ name: string }> };
    // Platform tenants (e.g. the warm pools' owner) may exist beside the users' ones.
    const names = list.tenants.map((x) => x.name).filter((n) => !n.startsWith("space-"));
    assert.deepEqual(names.sort(), ["acme", "default"]);
    // The key still authenticates (hashed at rest, same secret).
    const sbx = await fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": firstKey } });
    assert.equal(sbx.status, 200);
    const wrong = await fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": "e2b_wrong_wrong_wrong_wrong" } });
    assert.equal(wrong.status, 401);
    assert.equal(((await wrong.json()) as { code: number }).code, 401);

    // Verified credentials are remembered briefly; a revoke or a disable is felt at once.
    const acme = ((await created.json()) as { id: string }).id;
    const mk = async (kind: "keys" | "tokens", body: unknown) =>
      (await (await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${acme}/${kind}`, { method: "POST", headers: admin, body: JSON.stringify(body) })).json()) as { id: string; key?: string; token?: string };
    const key = await mk("keys", { name: "revoked-soon" });
    const token = await mk("tokens", { scopes: ["sandboxes:read"] });
    const viaKey = () => fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": key.key! } }).then((r) => r.status);
    const viaToken = () => fetch(`${stack.apiUrl}/v1/sandboxes`, { headers: { authorization: `Bearer ${token.token!}` } }).then((r) => r.status);
    assert.equal(await viaKey(), 200);
    assert.equal(await viaToken(), 200);
    assert.equal((await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${acme}/keys/${key.id}`, { method: "DELETE", headers: admin })).status, 204);
    assert.equal(await viaKey(), 401, "a revoked key is refused at once");
    assert.equal(await viaToken(), 200);
    assert.equal((await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${acme}/tokens/${token.id}`, { method: "DELETE", headers: admin })).status, 204);
    assert.equal(await viaToken(), 401, "a revoked token is refused at once");
    const key2 = await mk("keys", { name: "tenant-disabled" });
    assert.equal((await fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": key2.key! } })).status, 200);
    assert.equal((await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${acme}/disable`, { method: "POST", headers: admin })).status, 200);
    assert.equal((await fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": key2.key! } })).status, 401, "a disabled tenant's key is refused at once");
  } finally {
    await stack.stop();
  }
});
