import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "../../core/log.ts";
import { envdLaunch } from "./envd-launch.ts";

const log = createLogger("silent", "test");

test("envd starts from its snapshot only when this Node.js built it; otherwise, or with an unreadable record, from the bundle", async () => {
  const dir = mkdtempSync(join(tmpdir(), "envd-launch-"));
  try {
    assert.equal((await envdLaunch(dir, process.execPath, log)).kind, "bundle", "no record");
    writeFileSync(join(dir, "envd.blob.json"), JSON.stringify({ node: process.version, arch: process.arch }));
    assert.equal((await envdLaunch(dir, process.execPath, log)).kind, "snapshot");
    writeFileSync(join(dir, "envd.blob.json"), JSON.stringify({ node: "v0.0.1" }));
    assert.equal((await envdLaunch(dir, process.execPath, log)).kind, "bundle", "another Node.js");
    writeFileSync(join(dir, "envd.blob.json"), "{\"node\": ");
    assert.equal((await envdLaunch(dir, process.execPath, log)).kind, "bundle", "a record cut short");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
