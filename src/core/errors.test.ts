import { test } from "node:test";
import assert from "node:assert/strict";
import { apiHttpStatus, errorCodes, hasDetail, httpStatus, idempotencyConflict, INTERNAL_MESSAGE, publicMessage, retryHeadersOf, toOperationFailure, SpaceError } from "./errors.ts";

test("every code maps to an HTTP status and an operation failure", () => {
  for (const code of errorCodes) {
    assert.ok(httpStatus[code] >= 400, code);
    assert.ok(toOperationFailure(code).length > 0, code);
  }
  assert.equal(httpStatus.invalid_argument, 400);
  assert.equal(httpStatus.not_found, 404);
  assert.equal(toOperationFailure("invalid_argument"), "invalid_request");
  assert.equal(toOperationFailure("failed_precondition"), "conflict");
});

test("SpaceError.from keeps SpaceErrors and wraps the rest as internal", () => {
  const e = new SpaceError("not_found", "sandbox x not found");
  assert.equal(SpaceError.from(e), e);
  assert.equal(SpaceError.from(new Error("boom")).code, "internal");
  assert.equal(SpaceError.from({ code: "invalid_argument", message: "bad" }).code, "invalid_argument");
});

test("an idempotency conflict is told apart by its detail code, not its message", () => {
  const e = idempotencyConflict({ operationId: "op_1" });
  assert.equal(e.code, "aborted");
  assert.equal(e.retryable, false);
  assert.ok(hasDetail(e, "idempotency_conflict"));
  assert.ok(!hasDetail(new SpaceError("aborted", "idempotency_conflict"), "idempotency_conflict"));
  assert.ok(!hasDetail(new Error("idempotency_conflict"), "idempotency_conflict"));
});

test("an unclassified error's text stays in the log: publicMessage is generic for it, the message itself otherwise", () => {
  const wrapped = SpaceError.from(new Error('invalid byte sequence for encoding "UTF8": 0x00'));
  assert.equal(wrapped.code, "internal");
  assert.equal(publicMessage(wrapped), INTERNAL_MESSAGE);
  assert.match(wrapped.message, /0x00/, "the log keeps the cause");
  assert.equal(publicMessage(new SpaceError("invalid_argument", "metadata.a: too long")), "metadata.a: too long");
  assert.equal(publicMessage(SpaceError.from(new SpaceError("not_found", "sandbox x not found"))), "sandbox x not found");
});

test("the control-plane APIs answer resource_exhausted with 429 and its retry headers; envd keeps 507", () => {
  assert.equal(apiHttpStatus("resource_exhausted"), 429);
  assert.equal(httpStatus.resource_exhausted, 507);
  assert.equal(apiHttpStatus("not_found"), 404);
  const cases: Array<[SpaceError, Record<string, string>]> = [
    [new SpaceError("resource_exhausted", "tenant quota exceeded: sandboxes 2 of 2", { detail: "quota_exceeded" }), { "should-retry": "false" }],
    [new SpaceError("resource_exhausted", "rate limit exceeded", { detail: "rate_limited", details: { retryAfterS: 2.2 } }), { "retry-after": "3" }],
    [new SpaceError("resource_exhausted", "1 node full (vcpu)", { details: { rejected: {} } }), { "retry-after": "7" }],
    [new SpaceError("unavailable", "busy"), {}],
  ];
  for (const [e, headers] of cases) assert.deepEqual(retryHeadersOf(e, 7), headers, e.message);
});
