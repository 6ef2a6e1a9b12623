/**
 * The web dashboard in a real browser (issue 23): chromium (Debian's, driven by
 * playwright-core) against a real `space up`. A user signs in with the API key, sees a
 * sandbox the e2b SDK created appear without reloading (the live stream), runs `echo hi`
 * in its terminal (xterm.js over envd's PTY through the gateway), uploads a file the SDK
 * reads back, kills the sandbox from the page; the operator drains the node, finds the
 * failed operation with its code, reads the placement census, and creates and revokes a
 * tenant's API key and token (the secret shown once); the tenant does the same with its
 * own, the new key working on the ECW API until revoked. Every page's
 * screenshot lands in dist/test-artifacts/dashboard/ (test/support/browser.ts).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import type { Browser, Page } from "playwright-core";
import { adminRequest, startStack, waitFor, type Stack } from "../support/stack.ts";
import { ARTIFACTS, browserSkip, launchBrowser } from "../support/browser.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : browserSkip();

describe("the dashboard in chromium", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let browser: Browser;
  let page: Page;
  let sb: Sandbox;
  /** A command operation that failed (its binary does not exist): the operator's operations page lists it. */
  let failedOp: string;
  const nav = { getByRole: (role: "link", o: { name: string }) => page.getByRole("navigation", { name: "Main" }).getByRole(role, o) };
  const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    browser = await launchBrowser();
    page = await browser.newPage({ viewport: { width: 1366, height: 768 } });
  });
  after(async () => {
    await sb?.kill().catch(() => {});
    await browser?.close();
    await stack?.stop();
  });

  async function signIn(role: "tenant" | "operator", secret: string) {
    await page.goto(`${stack.apiUrl}/dashboard/`);
    // Signed out whatever an earlier step left (the session lives in sessionStorage).
    await page.evaluate("sessionStorage.clear()");
    await page.reload();
    await page.getByLabel(role === "tenant" ? "Tenant (API key)" : "Operator (admin token)").check();
    await page.getByLabel(role === "tenant" ? "API key (E2B_API_KEY)" : "Admin token (SPACE_ADMIN_TOKEN)").fill(secret);
    await page.getByRole("button", { name: "Sign in" }).click();
  }

  test("served at /dashboard by space up, with hashed assets and the gateway's URL", async () => {
    // The first request builds it in a checkout whose build is missing or stale (static.ts).
    const index = await fetch(`${stack.apiUrl}/dashboard/`);
    assert.equal(index.status, 200);
    const html = await index.text();
    const asset = /src="(\/dashboard\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(asset, html);
    const js = await fetch(`${stack.apiUrl}${asset}`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get("content-type") ?? "", /javascript/);
    assert.match(js.headers.get("cache-control") ?? "", /immutable/);
    // xterm.js (most of the script) is loaded by the terminal tab only: every other page starts without it.
    const entry = await js.text();
    assert.doesNotMatch(entry, /xterm-helper-textarea/);
    assert.ok(entry.length < 120_000, `the entry script is ${entry.length} bytes`);
    assert.equal((await fetch(`${stack.apiUrl}/dashboard/..%2f..%2fpackage.json`)).status, 404);
    assert.deepEqual(await (await fetch(`${stack.apiUrl}/dashboard/config.json`)).json(), { sandbox_url: stack.sandboxUrl });
  });

  test("the live streams need a credential and show a tenant only its own sandboxes", async () => {
    assert.equal((await fetch(`${stack.apiUrl}/v1/events/sandboxes`)).status, 401);
    assert.equal((await fetch(`${stack.apiUrl}/admin/api/v1/events/fleet`, { headers: { authorization: `Bearer ${stack.apiKey}` } })).status, 403);
    const other = await adminRequest(stack, "POST", "/tenants", { name: "dashboard-other" });
    const key = await adminRequest(stack, "POST", `/tenants/${String(other.body.id)}/keys`, { name: "k" });
    const mine = await Sandbox.create({ ...opts, timeoutMs: 300_000, metadata: { who: "first" } });
    try {
      const first = async (secret: string) => {
        const stop = new AbortController();
        const res = await fetch(`${stack.apiUrl}/v1/events/sandboxes`, { headers: { authorization: `Bearer ${secret}` }, signal: stop.signal });
        assert.equal(res.status, 200);
        assert.match(res.headers.get("content-type") ?? "", /text\/event-stream/);
        const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
        let text = "";
        while (!text.includes("\n\n")) text += (await reader.read()).value ?? "";
        stop.abort();
        assert.match(text, /^event: sandboxes\n/);
        return (JSON.parse(text.split("data: ")[1]!.split("\n")[0]!) as { sandboxes: Array<{ id: string }> }).sandboxes.map((s) => s.id);
      };
      assert.ok((await first(stack.apiKey)).includes(mine.sandboxId));
      assert.ok(!(await first(String(key.body.key))).includes(mine.sandboxId));
    } finally {
      await mine.kill();
    }
  });

  test("sign in, see a new sandbox appear, use its terminal and files, kill it", async () => {
    await signIn("tenant", "not-a-key");
    await page.getByRole("alert").filter({ hasText: "Refused" }).waitFor();
    await shot("01-sign-in-refused");
    await signIn("tenant", stack.apiKey);
    await page.getByRole("table", { name: "Sandboxes" }).waitFor();
    await shot("02-sandboxes-before");

    // Created by the SDK while the page is open: the stream brings it, no reload.
    sb = await Sandbox.create({ ...opts, timeoutMs: 600_000, metadata: { purpose: "dashboard-e2e" } });
    const row = page.locator(`tr[data-sandbox="${sb.sandboxId}"]`);
    await row.waitFor({ timeout: 30_000 });
    assert.match(await row.innerText(), /running/);
    assert.match(await row.innerText(), /purpose=dashboard-e2e/);
    await page.getByLabel("Metadata").fill("purpose=nothing-like-this");
    await row.waitFor({ state: "detached" });
    await page.getByLabel("Metadata").fill("purpose=dashboard-e2e");
    await row.waitFor();
    await shot("03-sandboxes-live");

    await row.getByRole("link", { name: sb.sandboxId }).click();
    await page.getByRole("heading", { name: `Sandbox ${sb.sandboxId}` }).waitFor();
    await page.getByRole("region", { name: "Usage" }).waitFor();
    await shot("04-sandbox-detail");

    await page.getByRole("link", { name: "Terminal" }).click();
    await page.locator('[data-terminal-status="connected"]').waitFor({ timeout: 60_000 });
    await page.locator(".xterm").click();
    await page.keyboard.type("echo hi\n");
    // The command's own output line, not the echoed input ("$ echo hi").
    await waitFor(
      async () => (await page.locator(".xterm-rows > div").allInnerTexts()).some((l) => l.trim() === "hi"),
      "the terminal printed hi",
      30_000,
    );
    await shot("05-terminal");

    await page.getByRole("link", { name: "Files" }).click();
    await page.getByRole("table", { name: "Files in /home/user" }).waitFor();
    const content = `uploaded from the dashboard ${Date.now()}\n`;
    await page.getByLabel("Upload into /home/user").setInputFiles({ name: "from-browser.txt", mimeType: "text/plain", buffer: Buffer.from(content) });
    await page.locator('tr[data-file="from-browser.txt"]').waitFor();
    assert.equal(await sb.files.read("/home/user/from-browser.txt"), content);
    await sb.files.write("/home/user/from-sdk.txt", "written by the SDK\n");
    await page.getByRole("button", { name: "Open" }).click();
    const download = page.waitForEvent("download");
    await page.getByRole("button", { name: "Download from-sdk.txt" }).click();
    const file = await download;
    assert.equal(file.suggestedFilename(), "from-sdk.txt");
    assert.equal(readFileSync((await file.path())!, "utf8"), "written by the SDK\n");
    await shot("06-files");

    // An operation that fails with a code, for the operator's operations page below.
    const run = await fetch(`${stack.apiUrl}/v1/sandboxes/${sb.sandboxId}/commands`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ cmd: "/definitely/not/here" }),
    });
    assert.equal(run.status, 202);
    failedOp = ((await run.json()) as { id: string }).id;
    const done = (await (await fetch(`${stack.apiUrl}/v1/operations/${failedOp}?wait=30s`, { headers: { authorization: `Bearer ${stack.apiKey}` } })).json()) as {
      state: string;
      failure: { code: string } | null;
    };
    assert.equal(done.state, "failed");
    assert.equal(done.failure?.code, "invalid_request");

    await page.getByRole("button", { name: "Kill" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Confirm kill" }).click();
    await page.getByRole("status").filter({ hasText: "is gone" }).waitFor({ timeout: 60_000 });
    assert.equal(await Sandbox.getInfo(sb.sandboxId, opts).catch(() => null), null);
    await shot("07-sandbox-killed");
    await nav.getByRole("link", { name: "Sandboxes" }).click();
    await page.getByRole("table", { name: "Sandboxes" }).waitFor();
    assert.equal(await page.locator(`tr[data-sandbox="${sb.sandboxId}"]`).count(), 0);

    await nav.getByRole("link", { name: "Templates" }).click();
    await page.getByRole("table", { name: "Templates" }).waitFor();
    // The page lists what the API lists for this tenant.
    const listed = (await (await fetch(`${stack.apiUrl}/v1/templates`, { headers: { authorization: `Bearer ${stack.apiKey}` } })).json()) as { templates: unknown[] };
    assert.equal(await page.getByRole("table", { name: "Templates" }).locator("tbody tr").count(), listed.templates.length);
    await shot("08-templates");
    await nav.getByRole("link", { name: "Operations" }).click();
    await page.getByRole("table", { name: "Operations" }).waitFor();
    await shot("09-operations");
    await page.getByRole("button", { name: "Sign out" }).click();
  });

  test("a tenant lists its own keys and tokens, creates a key that works on ECW, revokes it with a confirmation", async () => {
    const ecw = (key: string) => fetch(`${stack.apiUrl}/sandboxes`, { headers: { "x-api-key": key } }).then((r) => r.status);
    await signIn("tenant", stack.apiKey);
    await page.getByRole("table", { name: "Sandboxes" }).waitFor();
    await nav.getByRole("link", { name: "Keys and tokens" }).click();
    const keys = page.getByRole("table", { name: "API keys" });
    await keys.waitFor();
    // The key signed in with, by its prefix (Native /v1/api-keys with that key).
    assert.match(await keys.innerText(), new RegExp(`${stack.apiKey.slice(0, 10)}…`));

    await page.getByLabel("Key name").fill("tenant-made");
    await page.getByRole("button", { name: "Create API key" }).click();
    const secretBox = page.getByLabel("New secret for tenant-made");
    await secretBox.waitFor();
    const key = await secretBox.inputValue();
    assert.match(key, /^e2b_[0-9a-f]{40}$/);
    assert.equal(await ecw(key), 200, "the new key lists sandboxes on the ECW API");
    const row = keys.locator(`tr[data-prefix="${key.slice(0, 10)}"]`);
    await row.waitFor();
    await shot("19-tenant-key-created");
    await page.getByRole("button", { name: "Done" }).click();
    await secretBox.waitFor({ state: "detached" });
    assert.equal((await page.content()).includes(key), false, "shown once");

    await row.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog", { name: /Revoke tenant-made/ }).getByRole("button", { name: "Cancel" }).click();
    assert.equal(await ecw(key), 200, "cancel leaves it live");
    await row.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog", { name: /Revoke tenant-made/ }).getByRole("button", { name: "Confirm revoke" }).click();
    await row.locator(".state.revoked").waitFor();
    assert.equal(await ecw(key), 401, "a revoked key is refused at once");
    assert.equal(await ecw(stack.apiKey), 200, "the key signed in with is untouched");

    const tokens = page.getByRole("table", { name: "Access tokens" });
    await page.getByLabel("Token name").fill("tenant-reader");
    await page.getByRole("button", { name: "Create token" }).click();
    const tokenBox = page.getByLabel("New secret for tenant-reader");
    await tokenBox.waitFor();
    const token = await tokenBox.inputValue();
    const asBearer = () => fetch(`${stack.apiUrl}/v1/sandboxes?limit=1`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.status);
    assert.equal(await asBearer(), 200);
    const tokenRow = tokens.locator(`tr[data-prefix="${token.slice(0, 10)}"]`);
    assert.match(await tokenRow.innerText(), /sandboxes:read[\s\S]*never/);
    await tokenRow.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog", { name: /Revoke tenant-reader/ }).getByRole("button", { name: "Confirm revoke" }).click();
    await tokenRow.locator(".state.revoked").waitFor();
    assert.equal(await asBearer(), 401);
    await shot("20-tenant-keys-and-tokens");
    await page.getByRole("button", { name: "Sign out" }).click();
  });

  test("the operator drains the node, with a confirmation, and readies it", async () => {
    await signIn("operator", stack.adminToken);
    const nodes = page.getByRole("table", { name: "Nodes" });
    await nodes.waitFor();
    const node = (await adminRequest(stack, "GET", "/nodes")).body.nodes as Array<{ id: string; name: string; status: string }>;
    assert.equal(node.length, 1);
    const row = page.locator(`tr[data-node="${node[0]!.name}"]`);
    assert.match(await row.innerText(), /ready/);
    await shot("10-nodes");

    await row.getByRole("button", { name: "Drain" }).click();
    const dialog = page.getByRole("dialog");
    // Cancel leaves it ready.
    await dialog.getByRole("button", { name: "Cancel" }).click();
    assert.equal(((await adminRequest(stack, "GET", `/nodes/${node[0]!.id}`)).body as { status: string }).status, "ready");
    await row.getByRole("button", { name: "Drain" }).click();
    await dialog.getByRole("button", { name: "Confirm drain" }).click();
    await row.locator('[data-status="draining"]').waitFor({ timeout: 30_000 });
    assert.equal(((await adminRequest(stack, "GET", `/nodes/${node[0]!.id}`)).body as { status: string }).status, "draining");
    await shot("11-node-draining");

    await row.getByRole("button", { name: "Ready" }).click();
    await dialog.getByRole("button", { name: "Confirm ready" }).click();
    await row.locator('[data-status="ready"]').waitFor({ timeout: 30_000 });

    await nav.getByRole("link", { name: "Warm pools" }).click();
    await page.getByRole("region", { name: "Warm pools" }).waitFor();
    await shot("12-warm-pools");
    await nav.getByRole("link", { name: "Operations" }).click();
    const failures = page.getByRole("table", { name: "Recent failures" });
    await failures.waitFor();
    const failedRow = failures.locator(`tr[data-operation="${failedOp}"]`);
    assert.match(await failedRow.innerText(), /command\.run[\s\S]*failed[\s\S]*invalid_request/);
    await shot("13-operations");

    // The census the Admin API computes now, shown as it answers.
    await nav.getByRole("link", { name: "Placement census" }).click();
    await page.getByRole("table", { name: "Running sandboxes" }).waitFor();
    const census = (await adminRequest(stack, "GET", "/placement/census")).body as { gate: string; running: Record<string, number>; pending: Record<string, number> };
    assert.equal(await page.locator("[data-gate]").innerText(), census.gate);
    for (const [k, v] of Object.entries(census.running)) {
      assert.equal(await page.getByRole("table", { name: "Running sandboxes" }).locator(`tr[data-census="${k}"] td`).nth(1).innerText(), String(v), k);
    }
    assert.deepEqual(Object.keys(census.pending).sort(), ["environment_not_usable", "no_evidence"]);
    await shot("14-placement-census");

    await nav.getByRole("link", { name: "Tenants" }).click();
    await page.getByRole("table", { name: "Tenants" }).waitFor();
    assert.match(await page.getByRole("table", { name: "Tenants" }).innerText(), /dashboard-other/);
    await shot("15-tenants");
  });

  test("the operator lists a tenant's keys and tokens by prefix, creates one shown once, revokes it", async () => {
    const tenant = (await adminRequest(stack, "GET", "/tenants")).body.tenants as Array<{ id: string; name: string }>;
    const other = tenant.find((t) => t.name === "dashboard-other")!;
    const existing = ((await adminRequest(stack, "GET", `/tenants/${other.id}/keys`)).body.keys as Array<{ id: string; prefix: string }>)[0]!;
    const asBearer = (secret: string) => fetch(`${stack.apiUrl}/v1/sandboxes?limit=1`, { headers: { authorization: `Bearer ${secret}` } }).then((r) => r.status);
    await nav.getByRole("link", { name: "Tenants" }).click();
    await page.getByRole("link", { name: "Keys and tokens of dashboard-other" }).click();
    const keys = page.getByRole("table", { name: "API keys" });
    await keys.waitFor();
    // Listed by the stored prefix, never the secret (the API does not have it).
    assert.match(await keys.locator(`tr[data-credential="${existing.id}"]`).innerText(), new RegExp(`${existing.prefix}…`));

    await page.getByLabel("Key name").fill("from-the-dashboard");
    await page.getByRole("button", { name: "Create API key" }).click();
    const secretBox = page.getByLabel("New secret for from-the-dashboard");
    await secretBox.waitFor();
    const key = await secretBox.inputValue();
    assert.match(key, /^e2b_[0-9a-f]{40}$/);
    assert.equal(await asBearer(key), 200, "the key shown once authenticates");
    const row = keys.locator(`tr[data-prefix="${key.slice(0, 10)}"]`);
    await row.waitFor();
    await shot("16-key-created");
    await page.getByRole("button", { name: "Done" }).click();
    await secretBox.waitFor({ state: "detached" });
    // Shown once: nothing on the page holds it any more.
    assert.equal(await page.locator("input").evaluateAll((els, k) => els.some((e) => (e as unknown as { value: string }).value === k), key), false);
    assert.equal((await page.content()).includes(key), false);

    await row.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog", { name: /Revoke from-the-dashboard/ }).getByRole("button", { name: "Cancel" }).click();
    assert.equal(await asBearer(key), 200, "cancel leaves it live");
    await row.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog", { name: /Revoke from-the-dashboard/ }).getByRole("button", { name: "Confirm revoke" }).click();
    await row.locator(".state.revoked").waitFor();
    assert.equal(await asBearer(key), 401, "a revoked key is refused");

    const tokens = page.getByRole("table", { name: "Access tokens" });
    await page.getByLabel("Token name").fill("reader");
    await page.getByLabel("Expires in (days, empty = never)").fill("1");
    await page.getByRole("button", { name: "Create token" }).click();
    const tokenBox = page.getByLabel("New secret for reader");
    await tokenBox.waitFor();
    const token = await tokenBox.inputValue();
    assert.match(token, /^spt_/);
    assert.equal(await asBearer(token), 200, "sandboxes:read lists sandboxes");
    const create = await fetch(`${stack.apiUrl}/v1/sandboxes`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: "{}" });
    assert.equal(create.status, 403, "and nothing more");
    const tokenRow = tokens.locator(`tr[data-prefix="${token.slice(0, 10)}"]`);
    assert.match(await tokenRow.innerText(), /sandboxes:read/);
    await shot("17-token-created");
    await tokenRow.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog", { name: /Revoke reader/ }).getByRole("button", { name: "Confirm revoke" }).click();
    await tokenRow.locator(".state.revoked").waitFor();
    assert.equal(await asBearer(token), 401);
    await shot("18-keys-and-tokens");
  });
});
