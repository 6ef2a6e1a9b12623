/**
 * The node's sandbox records: a save replaces the record whole (core/whole-files.ts), a
 * replacement a crash left unrenamed is never read back as a record, and a remove takes both.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalSandboxRecords, type LocalSandboxRecord } from "./local-sandbox-records.ts";

const record = (id: string, state: LocalSandboxRecord["state"]): LocalSandboxRecord => ({
  spec: { sandboxId: id, executionId: "ex1", template: "base", vcpu: 1, memoryMib: 256, diskMib: 1024, envVars: {}, allowInternetAccess: true },
  state,
  address: "10.0.0.2",
  envdPort: 49983,
  startedAt: "2026-12-07T00:00:00.000Z",
});

test("a save replaces the record whole; a leftover replacement is not a record; remove takes both", async () => {
  const dir = mkdtempSync(join(tmpdir(), "space-records-"));
  try {
    const records = new LocalSandboxRecords(dir);
    await records.save(record("sb1", "creating"));
    await records.save(record("sb1", "running"));
    assert.deepEqual(readdirSync(dir), ["sb1.json"], "no replacement file left behind");
    assert.deepEqual((await records.list()).map((r) => [r.spec.sandboxId, r.state]), [["sb1", "running"]]);
    // A crash between the write and the rename: the old record stands, the half-written one is ignored.
    writeFileSync(join(dir, "sb1.json.new"), '{"spec":{"sandb');
    assert.deepEqual((await records.list()).map((r) => r.state), ["running"]);
    await records.remove("sb1");
    assert.deepEqual(readdirSync(dir), []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("saves and a remove of one record, not awaited between, land in call order: the last one stands", async () => {
  const dir = mkdtempSync(join(tmpdir(), "space-records-"));
  try {
    const records = new LocalSandboxRecords(dir);
    const states: LocalSandboxRecord["state"][] = ["creating", "running", "paused", "running", "killing"];
    await Promise.all(states.map((st) => records.save(record("sb1", st))));
    assert.deepEqual((await records.list()).map((r) => r.state), ["killing"]);
    await Promise.all([records.save(record("sb1", "running")), records.remove("sb1"), records.save(record("sb2", "running"))]);
    assert.deepEqual(readdirSync(dir), ["sb2.json"], "the remove came after the save before it");
    await Promise.all([records.remove("sb2"), records.save(record("sb2", "paused"))]);
    assert.deepEqual((await records.list()).map((r) => [r.spec.sandboxId, r.state]), [["sb2", "paused"]]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
