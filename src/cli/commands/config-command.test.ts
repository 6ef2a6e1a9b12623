import { test } from "node:test";
import assert from "node:assert/strict";
import { shown } from "./config-command.ts";

test("config: secrets and URL passwords are masked", () => {
  assert.equal(shown("SPACE_ADMIN_TOKEN", "spa_0123456789abcdefWXYZ"), "spa_****WXYZ");
  assert.equal(shown("SPACE_DATABASE_URL", "postgres://space:hunter2@db:5432/space"), "postgres://space:****@db:5432/space");
  assert.equal(shown("SPACE_API_PORT", "3000"), "3000");
});
