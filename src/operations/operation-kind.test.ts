import { test } from "node:test";
import assert from "node:assert/strict";
import { SpaceError } from "../core/errors.ts";
import { isOperationKind, operationKindTable, operationKinds, readRequest } from "./operation-kind.ts";
import { buildTarget, commandTarget, parseBuildTarget, parseTarget, parseVolumeTarget, sandboxTarget, volumeTarget } from "./requests.ts";

test("the table has one row per kind, and only those", () => {
  assert.deepEqual(Object.keys(operationKindTable).sort(), [...operationKinds].sort());
  assert.ok(isOperationKind("sandbox.pause"));
  assert.ok(!isOperationKind("sandbox.explode"));
});

test("dispatch policy: sandbox and volume kinds run one at a time per target; commands are not retried on unavailable", () => {
  for (const k of operationKinds) {
    const row = operationKindTable[k];
    assert.equal(row.serialised, k.startsWith("sandbox.") || k.startsWith("volume."), k);
    assert.equal(row.retriesUnavailable, !k.startsWith("command."), k);
    assert.equal(row.target, k.startsWith("sandbox.") ? "sandbox" : k.startsWith("command.") ? "command" : k.startsWith("volume.") ? "volume" : "build", k);
  }
});

test("readRequest reads a row with its kind's schema; an unreadable row is internal", () => {
  assert.deepEqual(readRequest("sandbox.pause", { sandbox_id: "s1" }), { sandbox_id: "s1" });
  assert.equal(readRequest("sandbox.create", {}).template, "base");
  assert.throws(
    () => readRequest("command.cancel", { sandbox_id: "s1" }),
    (e: unknown) => e instanceof SpaceError && e.code === "internal" && /command\.cancel/.test(e.message),
  );
});

test("targets round-trip", () => {
  assert.deepEqual(parseTarget(sandboxTarget("s1")), { sandboxId: "s1" });
  assert.deepEqual(parseTarget(commandTarget("s1", "cm_1")), { sandboxId: "s1", commandId: "cm_1" });
  assert.equal(parseBuildTarget(buildTarget("bd_abc")), "bd_abc");
  assert.equal(parseVolumeTarget(volumeTarget("vol_0123456789abcdef")), "vol_0123456789abcdef");
  assert.throws(() => parseVolumeTarget("volumes/data"), (e: unknown) => e instanceof SpaceError && e.code === "internal");
  assert.throws(() => parseTarget("builds/bd_abc"), (e: unknown) => e instanceof SpaceError && e.code === "internal");
  assert.throws(() => parseBuildTarget("sandboxes/s1"), (e: unknown) => e instanceof SpaceError && e.code === "internal");
});
