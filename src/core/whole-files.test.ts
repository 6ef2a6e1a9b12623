import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { WholeFiles } from "./whole-files.ts";

test("content that fits in a page is rewritten in place, shorter content padded; larger content replaces the file", async () => {
  const dir = mkdtempSync(join(tmpdir(), "space-whole-files-"));
  try {
    const files = new WholeFiles();
    const file = join(dir, "r.json");
    await files.write(file, JSON.stringify({ a: "x".repeat(400) }));
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const ino = statSync(file).ino;
    await files.write(file, JSON.stringify({ a: "short" }));
    assert.equal(statSync(file).ino, ino, "the same file: no new one renamed over it");
    assert.ok(statSync(file).size > 400, "padded to the old length");
    assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { a: "short" }, "nothing of the longer content is left to read");
    // Another process (a restart) does not know the file's length: still in place, still whole.
    await new WholeFiles().write(file, JSON.stringify({ b: 1 }));
    assert.equal(statSync(file).ino, ino);
    assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { b: 1 });
    await files.write(file, JSON.stringify({ a: "x".repeat(5000) }));
    assert.notEqual(statSync(file).ino, ino, "over a page: written beside and renamed");
    assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { a: "x".repeat(5000) });
    const big = statSync(file).ino;
    await files.write(file, JSON.stringify({ c: 2 }));
    assert.notEqual(statSync(file).ino, big, "padding to a length over a page would not be one page either: replaced");
    await files.write(file, JSON.stringify({ c: 3 }));
    assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { c: 3 });
    assert.deepEqual(readdirSync(dir), ["r.json"], "nothing left beside it");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a file removed behind the writer's back is made anew", async () => {
  const dir = mkdtempSync(join(tmpdir(), "space-whole-files-"));
  try {
    const files = new WholeFiles();
    const file = join(dir, "r.json");
    await files.write(file, "{}");
    rmSync(file);
    await files.write(file, '{"again":true}');
    assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { again: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
