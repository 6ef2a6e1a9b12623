import { test } from "node:test";
import assert from "node:assert/strict";
import { SpaceError } from "../../core/errors.ts";
import { describeFailure, EXIT } from "./cli-failure.ts";

const sys = (code: string, fields: Record<string, unknown>) => Object.assign(new Error(`${code}: raw text`), { code, ...fields });

test("taxonomy codes map to the documented exit codes", () => {
  assert.equal(describeFailure(new SpaceError("not_found", "sandbox x not found")).exitCode, EXIT.notFound);
  assert.equal(describeFailure(new SpaceError("failed_precondition", "paused")).exitCode, EXIT.refused);
  assert.equal(describeFailure(new SpaceError("unavailable", "down")).exitCode, EXIT.unreachable);
  assert.equal(describeFailure(new SpaceError("unauthenticated", "no key")).exitCode, EXIT.unauthorized);
  assert.equal(describeFailure(new SpaceError("invalid_argument", "bad")).exitCode, EXIT.usage);
  assert.equal(describeFailure(new Error("boom")).exitCode, EXIT.error);
});

test("system errors become one line naming the path or the port's variable", () => {
  assert.deepEqual(describeFailure(sys("ENOENT", { path: "/x/Dockerfile" })), { line: "no such file or directory: /x/Dockerfile", exitCode: EXIT.notFound });
  const inUse = describeFailure(sys("EADDRINUSE", { port: 3000, address: "127.0.0.1" }), { 3000: ["SPACE_API_PORT (or --port)"] });
  assert.equal(inUse.exitCode, EXIT.refused);
  assert.match(inUse.line, /^port 3000 on 127\.0\.0\.1 is already in use .*set SPACE_API_PORT \(or --port\) to a free port$/);
});
