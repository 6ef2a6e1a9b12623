import { test } from "node:test";
import assert from "node:assert/strict";
import { SpaceError } from "../core/errors.ts";
import { parsePlacement } from "./create-input.ts";
import { parseResources } from "../api/ecw/ecw-sandbox-create.ts";

const invalidNaming = (text: RegExp) => (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && text.test(e.message);

test("a JSON metadata value that does not parse names its key, an example and what it got", () => {
  assert.throws(() => parsePlacement("{gpu"), invalidNaming(/^metadata 'space\.placement' must be JSON like \{"node_group":"gpu".*\(got \{gpu\)$/));
  assert.throws(() => parseResources("vcpu=2"), invalidNaming(/^metadata 'space\.resources' must be JSON like \{"vcpu":2,.*\(got vcpu=2\)$/));
});

test("parsed metadata JSON still goes through its own checks", () => {
  assert.deepEqual(parsePlacement('{"node_group":"gpu"}'), { nodeGroup: "gpu" });
  assert.deepEqual(parseResources('{"vcpu":2,"disk_mib":4096}'), { vcpu: 2, diskMib: 4096 });
  assert.throws(() => parsePlacement("[]"), invalidNaming(/must be a JSON object/));
});
