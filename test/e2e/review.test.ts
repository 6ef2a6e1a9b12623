/**
 * `npm run review -- --quick` keeps working and keeps finding nothing: areas a (malformed
 * input: schemathesis on Native and Admin plus the ECW/envd corpus) and c (cross-tenant)
 * on a small budget, as a real user runs it (a child process, its --json report). Zero
 * 5xx, zero internal text, every cross-tenant attempt refused, nothing left on the host.
 * Needs root and the schemathesis venv (scripts/setup/schemathesis.sh; `npm test` makes it
 * when this file is selected).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { baseEnv } from "../support/space-process.ts";
import type { AreaResult } from "../../scripts/review/report.ts";

const venv = process.env.SPACE_SCHEMATHESIS_VENV ?? resolve(import.meta.dirname, "../../.tools/schemathesis");
const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : !existsSync(join(venv, "bin", "st")) ? `no schemathesis at ${venv}: run bash scripts/setup/schemathesis.sh` : false;

test("npm run review -- --quick --areas a,c: no 5xx, no internal text, tenants refused, no host leak", { skip, timeout: 10 * 60_000 }, async () => {
  const child = spawn("npm", ["run", "--silent", "review", "--", "--quick", "--areas", "a,c", "--json"], {
    env: { ...baseEnv(), ...(process.env.SPACE_SCHEMATHESIS_VENV ? { SPACE_SCHEMATHESIS_VENV: venv } : {}) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
  child.stderr.on("data", (b: Buffer) => (stderr += b.toString()).length > 200_000 && (stderr = stderr.slice(-100_000)));
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  let report: { clean: boolean; results: AreaResult[] };
  try {
    report = JSON.parse(stdout) as typeof report;
  } catch {
    assert.fail(`the review printed no JSON report (exit ${code}):\n${stdout.slice(-3000)}\n${stderr.slice(-3000)}`);
  }
  const byArea = Object.fromEntries(report.results.map((r) => [r.area, r]));
  const why = JSON.stringify(report.results.map((r) => ({ area: r.area, counts: r.counts, findings: r.findings })), null, 1);
  assert.deepEqual(Object.keys(byArea).sort(), ["host", "malformed", "tenants"], why);
  assert.ok(byArea.malformed!.counts.tried! > 500, `the corpus and schemathesis ran: ${why}`);
  assert.ok(byArea.tenants!.counts.tried! > 30, why);
  for (const r of report.results) {
    assert.equal(r.counts.serverErrors ?? 0, 0, `${r.area}: 5xx\n${why}`);
    assert.equal(r.counts.leakedText ?? 0, 0, `${r.area}: internal text\n${why}`);
    assert.equal(r.counts.notRefused ?? 0, 0, `${r.area}: not refused\n${why}`);
    assert.equal(r.counts.leaks ?? 0, 0, `${r.area}: host leaks\n${why}`);
    assert.equal(r.counts.crashes ?? 0, 0, `${r.area}: crashes\n${why}`);
    assert.deepEqual(r.findings, [], `${r.area}: findings\n${why}`);
  }
  assert.equal(report.clean, true, why);
  assert.equal(code, 0, stderr.slice(-2000));
});
