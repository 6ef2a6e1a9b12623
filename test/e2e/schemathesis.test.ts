/**
 * schemathesis (property-based HTTP fuzzing from the OpenAPI documents) against a real
 * stack, with credentials: Native (`/v1/openapi.json`, a tenant's API key) and Admin
 * (`/admin/api/v1/openapi.json`, the admin token). Checks: no 5xx (`not_a_server_error`)
 * and every answer matching its documented schema (`response_schema_conformance`).
 * Bounded: a few examples per operation and a time budget per document.
 *
 * The venv comes from scripts/setup/schemathesis.sh (`npm test` runs it when this file is
 * selected); SPACE_SCHEMATHESIS_VENV points elsewhere. SPACE_SCHEMATHESIS_SEED replays a run.
 * Admin runs second and without PUT /warm-pools (a fuzzed pool of `base` would start
 * hundreds of sandboxes); the nodes it registers are fake and the stack is thrown away.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startStack, type Stack } from "../support/stack.ts";

const venv = process.env.SPACE_SCHEMATHESIS_VENV ?? resolve(import.meta.dirname, "../../.tools/schemathesis");
const st = join(venv, "bin", "st");
const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : !existsSync(st) ? `no schemathesis at ${st}: run bash scripts/setup/schemathesis.sh` : false;

interface Report {
  complete: boolean;
  operations: { selected: number; tested: number; errored: number };
  test_cases: { generated: number; with_failures: number };
  failures: { code: string; title: string; count: number; operations: string[] }[];
  errors: unknown[];
}

/** One bounded schemathesis run; its JSON report and what it printed. */
function fuzz(doc: string, bearer: string, extra: string[] = []): { report: Report; seed: string; output: string } {
  const dir = mkdtempSync(join(tmpdir(), "space-schemathesis-"));
  const json = join(dir, "report.json");
  const seed = process.env.SPACE_SCHEMATHESIS_SEED;
  const r = spawnSync(
    st,
    [
      "run", doc,
      "--header", `Authorization: Bearer ${bearer}`,
      "--checks", "not_a_server_error,response_schema_conformance",
      "--phases", "examples,coverage,fuzzing",
      "--max-examples", "30",
      "--max-time", "90",
      // One worker: hypothesis describing lambdas in threads trips CPython 3.11's ast (SystemError).
      "--workers", "1",
      "--request-timeout", "40",
      "--no-color",
      "--report", "json", "--report-json-path", json,
      ...(seed ? ["--seed", seed] : []),
      ...extra,
    ],
    // Its example database (.schemathesis/) goes with the report, not into the checkout.
    { encoding: "utf8", timeout: 300_000, cwd: dir },
  );
  const output = `${r.stdout ?? ""}${r.stderr ?? ""}`;
  assert.ok(existsSync(json), `schemathesis wrote no report (exit ${r.status}):\n${output.slice(-4000)}`);
  const text = readFileSync(json, "utf8");
  // The seed is a 128-bit integer: keep its digits (a JS number would round it).
  return { report: JSON.parse(text) as Report, seed: /"seed": (\d+)/.exec(text)?.[1] ?? "?", output };
}

function assertClean(name: string, { report, seed, output }: { report: Report; seed: string; output: string }): void {
  // The counts the review asked for (inputs tried, 5xx, schema violations).
  const count = (code: string) => report.failures.filter((f) => f.code === code).reduce((n, f) => n + f.count, 0);
  console.log(
    `schemathesis ${name}: ${report.test_cases.generated} inputs on ${report.operations.tested} operations, ` +
      `${count("ST101")} server errors, ${count("ST102")} schema violations, seed ${seed}`,
  );
  assert.equal(report.operations.errored, 0, output.slice(-6000));
  assert.deepEqual(report.failures, [], output.slice(-6000));
  assert.ok(report.operations.tested >= report.operations.selected && report.test_cases.generated > 0, output.slice(-2000));
}

describe("schemathesis: Native and Admin OpenAPI documents", { skip, timeout: 12 * 60_000 }, () => {
  let stack: Stack;

  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack?.stop();
  });

  test("Native /v1: no server error, every answer as documented", () => {
    assertClean("native", fuzz(`${stack.apiUrl}/v1/openapi.json`, stack.apiKey));
  });

  test("Admin /admin/api/v1: no server error, every answer as documented", () => {
    assertClean("admin", fuzz(`${stack.apiUrl}/admin/api/v1/openapi.json`, stack.adminToken, ["--exclude-method", "PUT"]));
  });

  test("Admin: a token lifetime past what a date holds is 400 naming expires_in_s (was 500)", async () => {
    const admin = { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" };
    const tenant = (await (await fetch(`${stack.apiUrl}/admin/api/v1/tenants`, { method: "POST", headers: admin, body: JSON.stringify({ name: "st-expiry" }) })).json()) as { id: string };
    const r = await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${tenant.id}/tokens`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ scopes: ["admin"], expires_in_s: 9007199254740990 }),
    });
    const body = (await r.json()) as { message: string };
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.match(body.message, /expires_in_s/);
  });
});
