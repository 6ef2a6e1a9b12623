/**
 * The scenario catalogue stays honest: every scenario marked for Kubernetes is named by a
 * test of the Kubernetes end-to-end suite, every one it lacks says why, and every Direct
 * suite it points at exists.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { scenarios, skippedOn } from "./scenarios.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");

test("scenario catalogue: kubernetes scenarios are run by e2e.test.ts, the others skip with a reason, Direct suites exist", () => {
  const titles = [...readFileSync(resolve(import.meta.dirname, "e2e.test.ts"), "utf8").matchAll(/\btest\("([^"]+)"/g)].map((m) => m[1]!);
  for (const s of scenarios.filter((x) => x.substrates.includes("kubernetes"))) {
    assert.ok(titles.some((t) => t.includes(s.name)), `no kubernetes e2e test names ${s.name}`);
  }
  const skipped = skippedOn("kubernetes");
  assert.ok(skipped.length > 0);
  for (const s of skipped) assert.ok(s.reason.length > 20 && !s.reason.startsWith("applies to"), `${s.name} needs a reason`);
  for (const s of scenarios) {
    assert.ok(s.substrates.length > 0, s.name);
    if (s.direct) assert.ok(existsSync(resolve(ROOT, `${s.direct}.test.ts`)), `${s.direct}.test.ts for ${s.name}`);
  }
});
