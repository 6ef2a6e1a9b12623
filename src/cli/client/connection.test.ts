import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../core/config.ts";
import { maskSecret, resolveConnection } from "./connection.ts";

test("flag, then SPACE_*, then E2B_*, then the data directory, then the default", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "space-conn-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "endpoints.json"), JSON.stringify({ apiUrl: "http://127.0.0.1:4000", sandboxUrl: "http://127.0.0.1:4001" }));
  writeFileSync(join(dir, "secrets.json"), JSON.stringify({ adminToken: "spa_fromdir0000000000", internalToken: "spi_x", apiKey: "e2b_fromdir000000000" }));
  const at = (env: Record<string, string>, flags = {}) => resolveConnection(flags, loadConfig({ SPACE_DATA_DIR: dir, ...env }), env);

  const local = at({});
  assert.deepEqual([local.apiUrl.value, local.apiUrl.source], ["http://127.0.0.1:4000", "data-dir"]);
  assert.equal(local.sandboxUrl.value, "http://127.0.0.1:4001");
  assert.deepEqual([local.apiKey.value, local.adminToken.value], ["e2b_fromdir000000000", "spa_fromdir0000000000"]);

  const e2b = at({ E2B_API_URL: "http://e2b:1", E2B_API_KEY: "e2b_env" });
  assert.deepEqual([e2b.apiUrl.value, e2b.apiUrl.origin, e2b.apiKey.value], ["http://e2b:1", "E2B_API_URL", "e2b_env"]);
  const space = at({ E2B_API_URL: "http://e2b:1", SPACE_API_URL: "http://space:2", SPACE_ADMIN_TOKEN: "spa_env" });
  assert.deepEqual([space.apiUrl.value, space.apiUrl.origin, space.adminToken.origin], ["http://space:2", "SPACE_API_URL", "SPACE_ADMIN_TOKEN"]);
  const flag = at({ SPACE_API_URL: "http://space:2" }, { apiUrl: "http://flag:3", adminToken: "spa_flag" });
  assert.deepEqual([flag.apiUrl.value, flag.apiUrl.source, flag.adminToken.source], ["http://flag:3", "flag", "flag"]);

  const none = resolveConnection({}, loadConfig({ SPACE_DATA_DIR: join(dir, "missing"), SPACE_API_PORT: "3100" }), {});
  assert.deepEqual([none.apiUrl.value, none.apiUrl.source], ["http://127.0.0.1:3100", "default"]);
  assert.deepEqual([none.apiKey.value, none.apiKey.source], ["", "unset"]);
});

test("a masked secret keeps its prefix and last four characters, never the rest", () => {
  assert.equal(maskSecret("spa_abcdefghijklmnopWXYZ"), "spa_****WXYZ");
  assert.equal(maskSecret("short"), "****");
  assert.equal(maskSecret(""), "");
});
