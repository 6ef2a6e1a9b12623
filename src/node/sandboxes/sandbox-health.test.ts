import { test } from "node:test";
import assert from "node:assert/strict";
import { createLogger } from "../../core/log.ts";
import { SandboxHealth } from "./sandbox-health.ts";
import type { Observed } from "./sandbox-telemetry.ts";

const logger = createLogger("silent", "test");
const sbx = (id: string): Observed => ({ id, running: true, envd: { host: "10.0.0.2", port: 49983, accessToken: undefined } });

test("reported once after `threshold` unanswered checks in a row; an answer or a quiesced check does not count", async () => {
  const answers = new Map<string, Array<boolean | undefined>>([
    ["a", [false, false, true, false, false, undefined, false, false]],
    ["b", [true, true, true, true, true, true, true, true]],
  ]);
  const reports: string[] = [];
  const h = new SandboxHealth({
    intervalMs: 1000,
    threshold: 3,
    running: () => [sbx("a"), sbx("b")],
    probe: async (o) => answers.get(o.id)!.shift(),
    unhealthy: async (id, reason) => {
      reports.push(`${id}: ${reason}`);
      return true;
    },
    logger,
  });
  // a: miss, miss, answer (starts over), miss, miss, quiesced (not counted), miss = 3 in a row.
  for (let i = 0; i < 6; i++) await h.tick();
  assert.deepEqual(reports, []);
  await h.tick();
  await h.tick();
  assert.equal(reports.length, 1, reports.join("\n"));
  assert.match(reports[0]!, /^a: envd did not answer 3 health checks in a row/);
});

test("a report that failed is made again at the next check; a gone sandbox is forgotten", async () => {
  let fail = true;
  let running = [sbx("a")];
  const reports: string[] = [];
  const h = new SandboxHealth({
    intervalMs: 1000,
    threshold: 1,
    running: () => running,
    probe: async () => false,
    unhealthy: async (id) => {
      reports.push(id);
      if (fail) throw new Error("control plane away");
      return true;
    },
    logger,
  });
  await h.tick();
  fail = false;
  await h.tick();
  await h.tick();
  assert.deepEqual(reports, ["a", "a"]);
  running = [];
  await h.tick();
  running = [sbx("a")];
  await h.tick();
  assert.deepEqual(reports, ["a", "a", "a"]);
});
