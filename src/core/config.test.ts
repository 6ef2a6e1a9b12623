import { test } from "node:test";
import assert from "node:assert/strict";
import { loadConfig, ConfigError } from "./config.ts";

test("defaults parse", () => {
  const c = loadConfig({ SPACE_DATA_DIR: "/tmp/x" });
  assert.equal(c.SPACE_SUBSTRATE, "direct");
  assert.equal(c.SPACE_API_PORT, 3000);
  assert.equal(c.SPACE_NODE_DIR, "/tmp/x/node");
  assert.equal(c.SPACE_CONTROLLER_TICK_MS, 25);
});

test("a wrong value names the variable, the value and what is allowed", () => {
  assert.throws(
    () => loadConfig({ SPACE_SUBSTRATE: "Direct" }),
    (e: unknown) =>
      e instanceof ConfigError && e.message.includes('SPACE_SUBSTRATE="Direct"') && e.message.includes("direct|kubernetes"),
  );
  assert.throws(() => loadConfig({ SPACE_API_PORT: "70000" }), /SPACE_API_PORT="70000".*0 to 65535/);
  assert.throws(() => loadConfig({ SPACE_API_PORT: "abc" }), /SPACE_API_PORT="abc"/);
});

test("the project's own tooling variables (set-up, tests, benches) are not refused", () => {
  // `npm start` runs set-up and `space up` in one environment; a shell that exported a
  // test or set-up variable must still start every process.
  const env = { SPACE_TEST_DATABASE_URL: "postgres://x", SPACE_SETUP_SKIP_TEMPLATE: "1", SPACE_NO_CACHE: "1", SPACE_K8S_BUILD_TIMEOUT: "9", SPACE_BENCH_NODES: "2", SPACE_MACHINE_CACHE: "/tmp/c" };
  assert.doesNotThrow(() => loadConfig(env));
  assert.throws(() => loadConfig({ ...env, SPACE_TESTS: "1" }), /SPACE_TESTS is not a SPACE variable/);
});

test("unknown SPACE_ variables are refused so a typo is not silently ignored", () => {
  assert.throws(() => loadConfig({ SPACE_SUBSTRAT: "direct" }), /SPACE_SUBSTRAT is not a SPACE variable/);
});

test("every problem is reported at once", () => {
  assert.throws(
    () => loadConfig({ SPACE_RUNTIME: "docker", SPACE_LOG_LEVEL: "loud" }),
    (e: unknown) => e instanceof Error && e.message.includes("SPACE_RUNTIME") && e.message.includes("SPACE_LOG_LEVEL"),
  );
});
