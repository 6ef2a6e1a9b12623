/** The boot settings a sandbox takes from its template's metadata (node/sandboxes/template-boot). */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { templateBoot } from "../../src/node/sandboxes/template-boot.ts";

describe("templateBoot", () => {
  const base = { name: "t", rootfsSizeMib: 1, importedAt: "", source: "" };
  test("an imported template (base) asks for nothing", () => {
    assert.deepEqual(templateBoot(base), { env: {} });
    assert.deepEqual(templateBoot(undefined), { env: {} });
  });
  test("a built template: env, workdir, explicit user, start and ready commands", () => {
    const info = { ...base, env: { PATH: "/bin", FOO: "bar" }, workdir: "/srv", user: "root", defaultUser: "app", startCmd: "srv", readyCmd: "true" };
    assert.deepEqual(templateBoot(info), { env: { PATH: "/bin", FOO: "bar" }, workdir: "/srv", user: "app", startCmd: "srv", readyCmd: "true" });
  });
  test("the builder's defaults (workdir /, steps as root) leave envd's defaults alone", () => {
    assert.deepEqual(templateBoot({ ...base, env: {}, workdir: "/", user: "root" } as typeof base), { env: {} });
  });
});
