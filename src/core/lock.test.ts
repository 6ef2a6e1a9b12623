import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { lockDataDir } from "./lock.ts";
import { SpaceError } from "./errors.ts";

test("a second lock on the same directory is refused while the first holder lives", () => {
  const dir = mkdtempSync(join(tmpdir(), "space-lock-"));
  writeFileSync(join(dir, "space.lock"), String(process.ppid));
  assert.throws(() => lockDataDir(dir), (e: unknown) => e instanceof SpaceError && /in use by another SPACE process/.test(e.message));
});

test("a stale lock (dead pid) is taken over and released", () => {
  const dir = mkdtempSync(join(tmpdir(), "space-lock-"));
  writeFileSync(join(dir, "space.lock"), "2147483646");
  const lock = lockDataDir(dir);
  assert.ok(existsSync(join(dir, "space.lock")));
  lock.release();
  assert.ok(!existsSync(join(dir, "space.lock")));
});
