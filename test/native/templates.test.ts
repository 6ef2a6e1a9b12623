/** Native /v1/templates: tenant-visible templates with their builds and aliases; builds as operations. */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { Registry } from "prom-client";
import { createApiApp } from "../../src/api/app.ts";
import { authenticateBearer, bearerOf } from "../../src/api/auth.ts";
import { registerNativeRoutes } from "../../src/api/native/native-routes.ts";
import { BuildCoordinator } from "../../src/templates/build-coordinator.ts";
import { DirectSubstrate } from "../../src/substrate/direct/direct-substrate.ts";
import { StoreNodeDirectory } from "../../src/sandboxes/queries.ts";
import { testEngines } from "../support/db.ts";
import { createBuild, createTemplate, setRelease, updateBuild } from "../../src/store/templates.ts";
import { createToken } from "../../src/store/tokens.ts";
import { log, startHarness, type Harness } from "./harness.ts";

for (const engine of testEngines()) {
  describe(`native templates on ${engine.name}`, { skip: engine.skip }, () => {
    let h: Harness;
    let tokA: string;
    let tokB: string;
    let mine: string;
    before(async () => {
      h = await startHarness(engine.name, { dispatcher: false });
      tokA = (await createToken(h.db, { tenantId: h.tenantA.id, scopes: ["templates:read"] })).plaintext;
      tokB = (await createToken(h.db, { tenantId: h.tenantB.id, scopes: ["templates:read"] })).plaintext;
      const t = await createTemplate(h.db, { tenantId: h.tenantA.id, name: "web" });
      mine = t.id;
      const b = await createBuild(h.db, { templateId: t.id, vcpu: 2, memoryMib: 512 });
      await updateBuild(h.db, b.id, { status: "ready", rootfsSizeMib: 300, digest: "sha256:abc" });
      await setRelease(h.db, { tenantId: h.tenantA.id, templateId: t.id, alias: "web", tag: "default", buildId: b.id });
      await createTemplate(h.db, { tenantId: h.tenantB.id, name: "secret" });
      await createTemplate(h.db, { tenantId: h.tenantB.id, name: "shared", public: true });
    });
    after(() => h?.close());

    test("list: own first with builds and aliases; another tenant's public ones; never its private ones", async () => {
      const r = await h.req("GET", "/v1/templates", { token: tokA });
      assert.equal(r.status, 200);
      const names = (r.body.templates as { name: string }[]).map((t) => t.name);
      assert.ok(names.includes("web") && names.includes("shared"));
      assert.ok(!names.includes("secret"));
      const web = r.body.templates.find((t: { name: string }) => t.name === "web");
      assert.equal(web.owner, "own");
      assert.equal(web.builds.length, 1);
      assert.equal(web.builds[0].status, "ready");
      assert.equal(web.builds[0].rootfs_size_mib, 300);
      assert.deepEqual(web.aliases.map((a: { alias: string; tag: string }) => `${a.alias}:${a.tag}`), ["web:default"]);
      assert.equal(web.aliases[0].build_id, web.builds[0].id);
      assert.equal(r.body.templates.find((t: { name: string }) => t.name === "shared").owner, "shared");
    });

    test("get by id or name; a private template of another tenant is 404", async () => {
      assert.equal((await h.req("GET", `/v1/templates/${mine}`, { token: tokA })).body.name, "web");
      assert.equal((await h.req("GET", "/v1/templates/web", { token: tokA })).body.id, mine);
      assert.equal((await h.req("GET", `/v1/templates/${mine}`, { token: tokB })).status, 404);
      assert.equal((await h.req("GET", "/v1/templates/secret", { token: tokA })).status, 404);
    });

    test("needs templates:read", async () => {
      assert.equal((await h.req("GET", "/v1/templates", { token: h.tokens.readOnly })).status, 403);
    });
  });
}

/**
 * Native template builds as operations: the API's BuildCoordinator against a fake node
 * (node-api build routes), the real dispatcher running `template.build`.
 */
for (const engine of testEngines()) {
  describe(`native template builds on ${engine.name}`, { skip: engine.skip }, () => {
    let h: Harness;
    let app: FastifyInstance;
    let builds: BuildCoordinator;
    let node: Server;
    const received: Array<{ buildId: string; name: string; recipe: { from: unknown; capture?: boolean; startCmd?: string } }> = [];
    const pointed: string[] = [];
    const req = async (method: string, url: string, o: { token: string; body?: unknown }) => {
      const res = await app.inject({ method: method as "GET", url, headers: { authorization: `Bearer ${o.token}`, ...(o.body !== undefined ? { "content-type": "application/json" } : {}) }, ...(o.body !== undefined ? { payload: JSON.stringify(o.body) } : {}) });
      return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined };
    };
    let tok: string;
    let readOnly: string;

    before(async () => {
      h = await startHarness(engine.name, { dispatcher: false });
      tok = (await createToken(h.db, { tenantId: h.tenantA.id, scopes: ["templates:read", "templates:write"] })).plaintext;
      readOnly = (await createToken(h.db, { tenantId: h.tenantA.id, scopes: ["templates:read"] })).plaintext;
      // The fake node: accepts builds, reports a RUN `exit 7` as a failed step, the rest ready.
      node = createServer((rq, rs) => {
        let body = "";
        rq.on("data", (c: Buffer) => (body += c.toString()));
        rq.on("end", () => {
          const json = (code: number, v: unknown) => rs.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(v));
          if (rq.method === "POST" && rq.url === "/v1/builds") {
            const b = JSON.parse(body) as (typeof received)[number];
            received.push(b);
            return json(202, { buildId: b.buildId, name: b.name, status: "building", logEntries: [], logsTotal: 0 });
          }
          const m = /^\/v1\/builds\/([^/?]+)/.exec(rq.url ?? "");
          if (rq.method === "GET" && m) {
            const b = received.find((x) => x.buildId === m[1]);
            if (!b) return json(404, { code: "not_found", message: "unknown build" });
            const fails = JSON.stringify(b.recipe).includes("exit 7");
            const logEntries = [{ timestamp: new Date().toISOString(), level: "info", message: "step-output", step: "1" }];
            if (fails) return json(200, { buildId: b.buildId, name: b.name, status: "failed", logEntries, logsTotal: 1, error: { message: "step 1 (RUN exit 7) failed with exit code 7", step: "1" } });
            const result = { name: b.name, rootfsSizeMib: 310, digest: "sha256:feed", environment: "env1", cachedSteps: 1, builtSteps: 1, durationMs: 5, config: { env: {}, workdir: "/", user: "root" } };
            return json(200, { buildId: b.buildId, name: b.name, status: "ready", logEntries, logsTotal: 1, result });
          }
          if (rq.method === "PUT" && rq.url?.startsWith("/v1/templates/")) {
            pointed.push(rq.url.slice("/v1/templates/".length));
            return json(200, { name: "x", rootfsSizeMib: 310, importedAt: "", source: "" });
          }
          json(404, { code: "not_found", message: rq.url ?? "" });
        });
      });
      await new Promise<void>((r) => node.listen(0, "127.0.0.1", r));
      await h.db.execute(`UPDATE nodes SET address = $1`, [`http://127.0.0.1:${(node.address() as AddressInfo).port}`]);
      // Builds reach the fake node as they reach a real one: the Direct substrate over the store's nodes.
      const nodes = new StoreNodeDirectory(h.db);
      const substrate = new DirectSubstrate({ nodes, internalToken: "internal" });
      builds = new BuildCoordinator({ db: h.db, substrate, nodes, internalToken: "internal", log, pollMs: 20 });
      app = await createApiApp({
        db: h.db,
        log,
        metrics: new Registry(),
        surfaces: [(a) => registerNativeRoutes(a, { db: h.db, sandboxes: h.sandboxes, log, builds, authenticate: (r) => authenticateBearer(h.db, bearerOf(r), "admin-token-for-tests-0000") })],
      });
      await h.startDispatcher();
    });
    after(async () => {
      await builds?.close();
      await app?.close();
      node?.close();
      await h?.close();
    });

    const waitOp = (id: string) => h.waitOp(id, h.tokens.a);

    test("a build is an operation: 202, then succeeded with the ready build, released under its name and tags", async () => {
      const r = await req("POST", "/v1/templates/api-tpl/builds", {
        token: tok,
        body: { from_template: "base", steps: [{ type: "RUN", args: ["echo hi"] }], start_cmd: "srv", ready_cmd: "true", capture_after_ready: true, tags: ["v1"] },
      });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      assert.equal(r.body.kind, "template.build");
      const op = await waitOp(r.body.id);
      assert.equal(op.state, "succeeded", JSON.stringify(op));
      assert.equal(op.result.status, "ready");
      assert.equal(op.result.digest, "sha256:feed");
      const sent = received.find((b) => b.buildId === op.result.id)!;
      assert.deepEqual(sent.recipe.from, { kind: "template", name: "base" });
      assert.equal(sent.recipe.capture, true);
      const t = await req("GET", "/v1/templates/api-tpl", { token: tok });
      assert.deepEqual(t.body.aliases.map((a: { tag: string; build_id: string }) => `${a.tag}=${a.build_id}`).sort(), [`default=${op.result.id}`, `v1=${op.result.id}`]);
      assert.ok(pointed.includes(t.body.id), "the node's template id points at the build");
      const b = await req("GET", `/v1/templates/api-tpl/builds/${op.result.id}`, { token: tok });
      assert.equal(b.status, 200);
      assert.deepEqual(b.body.logs.map((l: { message: string }) => l.message), ["step-output"]);
    });

    test("a failing step fails the operation naming the step and exit code", async () => {
      const r = await req("POST", "/v1/templates/bad-tpl/builds", { token: tok, body: { steps: [{ type: "RUN", args: ["exit 7"] }] } });
      assert.equal(r.status, 202);
      const op = await waitOp(r.body.id);
      assert.equal(op.state, "failed");
      assert.equal(op.failure.code, "conflict");
      assert.match(op.failure.message, /step 1.*exit code 7/);
    });

    test("refused before anything is queued: bad bodies, an unknown base template, a bad image reference, a read-only token", async () => {
      const post = (body: unknown, token = tok) => req("POST", "/v1/templates/x-tpl/builds", { token, body });
      assert.equal((await post({ steps: [{ type: "COPY", args: ["a", "/b"] }] })).status, 400);
      assert.equal((await post({ start_cmd: undefined, capture_after_ready: true })).status, 400);
      assert.equal((await post({ from_template: "base", from_image: "oci:/x" })).status, 400);
      // Registry images are pulled now (issue 21); what is not an image reference is still refused.
      assert.equal((await post({ from_image: "docker.io/library/Not A Ref!" })).status, 400);
      assert.equal((await post({ from_template: "no-such-template" })).status, 404);
      assert.equal((await post({}, readOnly)).status, 403);
      const ops = await h.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM operations WHERE kind = 'template.build' AND request->>'name' = 'x-tpl'`);
      assert.equal(ops[0]!.n, 0);
    });
  });
}
