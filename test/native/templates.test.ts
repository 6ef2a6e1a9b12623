/** Native /v1/templates: tenant-visible templates with their builds and aliases. */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { testEngines } from "../support/db.ts";
import { createBuild, createTemplate, setRelease, updateBuild } from "../../src/store/templates.ts";
import { createToken } from "../../src/store/tokens.ts";
import { startHarness, type Harness } from "./harness.ts";

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
