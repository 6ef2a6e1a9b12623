import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { findUnstorable } from "./storable-input.ts";
import { LIMITS, boundedStringMap, unstorable } from "../core/limits.ts";

test("findUnstorable names the first NUL or unpaired surrogate by its path, keys too; raw bodies are not text", () => {
  assert.equal(findUnstorable({ a: [{ b: "x\u0000" }] }), "a.0.b: must not contain NUL bytes (\\u0000)");
  assert.equal(findUnstorable(Object.assign(Object.create(null) as object, { q: "\ud800" })), "q: must not contain unpaired UTF-16 surrogates");
  assert.match(findUnstorable({ "k\u0000": "v" }) ?? "", /^value: key "k\\u0000" must not contain NUL/);
  assert.equal(findUnstorable({ ok: "paired \ud83d\ude00 emoji", n: 1, nil: null }), undefined);
  assert.equal(findUnstorable(Buffer.from("a\u0000b")), undefined);
  assert.equal(findUnstorable(Readable.from(["a\u0000b"])), undefined);
  // The router's params object has a prototype of its own.
  class Params {
    id = "\u0000";
  }
  assert.equal(findUnstorable(new Params()), "id: must not contain NUL bytes (\\u0000)");
  assert.equal(unstorable("\udc00"), "must not contain unpaired UTF-16 surrogates");
});

test("boundedStringMap: entries, key, value and total bytes, each named", () => {
  const m = boundedStringMap("metadata", LIMITS.metadata);
  assert.ok(m.safeParse({ a: "b" }).success);
  const issues = (v: unknown) => (m.safeParse(v).error?.issues ?? []).map((i) => `${i.path.join(".")}|${i.message}`);
  assert.deepEqual(issues(Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, ""]))), ["|metadata may have at most 64 entries (got 65)"]);
  assert.deepEqual(issues({ a: "é".repeat(2049) }), ["a|metadata value is 4098 bytes; at most 4096"]);
  assert.match(issues({ ["k".repeat(257)]: "" })[0] ?? "", /^\|metadata key "k+"… is 257 bytes; at most 256$/);
  assert.match(issues(Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`k${i}`, "x".repeat(4000)])))[0] ?? "", /at most 16384 bytes$/);
});
