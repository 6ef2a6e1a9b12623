import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Fastify from "fastify";
import { registerDashboardStatic } from "./static.ts";
import { preflightHeaders, responseCors } from "../gateway/cors.ts";

test("the dashboard's files: index, hashed assets cached for good, nothing outside its folder", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "dashboard-static-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(join(dir, "assets"));
  writeFileSync(join(dir, "index.html"), "<!doctype html><title>x</title>");
  writeFileSync(join(dir, "assets", "index-abc.js"), "console.log(1)");
  // A build that says it is current (static.ts rebuilds only a stale one, in a checkout).
  writeFileSync(join(dir, "inputs.json"), JSON.stringify({ files: [], newest: Date.now() }));
  writeFileSync(join(tmpdir(), "dashboard-secret.txt"), "TOP-SECRET-CONTENT");
  const app = Fastify();
  registerDashboardStatic(app, dir);

  const bare = await app.inject({ url: "/dashboard" });
  assert.equal(bare.statusCode, 302);
  assert.equal(bare.headers.location, "/dashboard/");
  const index = await app.inject({ url: "/dashboard/" });
  assert.equal(index.statusCode, 200);
  assert.match(String(index.headers["content-type"]), /text\/html/);
  assert.equal(index.headers["cache-control"], "no-cache");
  assert.equal(index.headers["x-frame-options"], "DENY");
  const js = await app.inject({ url: "/dashboard/assets/index-abc.js" });
  assert.equal(js.statusCode, 200);
  assert.match(String(js.headers["content-type"]), /javascript/);
  assert.match(String(js.headers["cache-control"]), /immutable/);
  for (const url of ["/dashboard/..%2fdashboard-secret.txt", "/dashboard/%2e%2e/dashboard-secret.txt", "/dashboard/nope.js", "/dashboard/assets"]) {
    const r = await app.inject({ url });
    assert.equal(r.statusCode, 404, url);
    assert.doesNotMatch(r.body, /TOP-SECRET-CONTENT/);
  }
});

test("envd CORS: a preflight is answered for any origin, a page's response names it", () => {
  assert.equal(preflightHeaders("POST", { "access-control-request-method": "POST" }), null);
  assert.equal(preflightHeaders("OPTIONS", {}), null);
  const h = preflightHeaders("OPTIONS", { "access-control-request-method": "POST", origin: "http://x" });
  assert.equal(h?.["access-control-allow-origin"], "*");
  assert.match(String(h?.["access-control-allow-headers"]), /x-access-token/);
  assert.deepEqual(responseCors({}), {});
  assert.equal(responseCors({ origin: "http://x" })["access-control-allow-origin"], "*");
});
