/**
 * Shared edge of the Native API: body/query validation naming the field, scopes, the
 * 202-with-an-operation answer, and Idempotency-Key handling for every mutation.
 */
import { currentTraceParent } from "../../core/tracing.ts";
import type { FastifyReply, FastifyRequest } from "fastify";
import { SpaceError, hasDetail } from "../../core/errors.ts";
import type { TenantId } from "../../core/ids.ts";
import type { Queryable } from "../../store/db.ts";
import { enqueueOperation, findReplay, type Operation as OperationRow } from "../../store/operations.ts";
import { idempotencyKey } from "../idempotency-key.ts";
import { requireScope, requireTenant, scopesLacking, type Principal, type Scope } from "../auth.ts";
import type { OperationKind } from "../../operations/operation-kind.ts";
import type { NativeDeps } from "./deps.ts";
import { toOperation } from "./native-present.ts";

export { parseInput as parse } from "../../core/validate.ts";

/** Authenticates and checks one scope; returns the tenant the request acts for. */
export async function tenantWith(deps: NativeDeps, req: FastifyRequest, scope: Scope): Promise<{ principal: Principal; tenantId: TenantId }> {
  const principal = await deps.authenticate(req);
  requireScope(principal, scope);
  return { principal, tenantId: requireTenant(principal) };
}

/**
 * Any one of `scopes` (e.g. reading operations: whoever may create them). A credential of
 * no tenant (the admin token) is 400 as in tenantWith, not a missing scope.
 */
export async function tenantWithAny(deps: NativeDeps, req: FastifyRequest, scopes: readonly Scope[]): Promise<TenantId> {
  const principal = await deps.authenticate(req);
  if (scopesLacking(principal, scopes).length === scopes.length) {
    throw new SpaceError("permission_denied", `missing scope: one of ${scopes.join(", ")} is required; this token has [${principal.scopes.join(", ")}]`);
  }
  return requireTenant(principal);
}

export function sendIdempotencyConflict(reply: FastifyReply, key: string, existing?: { id: string; kind: string }): FastifyReply {
  return reply.status(409).send({
    code: 409,
    message: `Idempotency-Key ${JSON.stringify(key)} was already used with a different request${existing ? ` (operation ${existing.id}, ${existing.kind})` : ""}; use a new key for a new request`,
    reason: "idempotency_conflict",
  });
}

export function sendOperation(reply: FastifyReply, op: OperationRow, replayed: boolean): FastifyReply {
  void reply.header("location", `/v1/operations/${op.id}`);
  if (replayed) void reply.header("idempotent-replayed", "true");
  return reply.status(202).send(toOperation(op));
}

export interface Mutation {
  tenantId: TenantId;
  kind: OperationKind;
  target: string;
  /** What idempotency compares: the caller's intent only (no server-chosen ids). */
  request: unknown;
  deadlineMs: number | null;
  /** Admission checks (404 another tenant's sandbox, 409 wrong state…) after the replay check. */
  admit?: () => Promise<void>;
  /** Rows to write with the operation, in its transaction (only when it is new). */
  also?: (tx: Queryable, op: OperationRow, key: string | null) => Promise<void>;
  /**
   * A head start claimed after admission (a warm member for a create): its target replaces
   * `target`; released when the request turns out to replay another one or fails.
   */
  reserve?: () => Promise<{ target: string; release(): Promise<void> } | null>;
}

/**
 * Records a mutation as an operation and answers 202. With an Idempotency-Key, an
 * earlier request with the same key replays (same key + same request → the original
 * operation, whatever its state — a completed delete replays even though the sandbox is
 * gone); a different request is 409 `idempotency_conflict`. Concurrent duplicates
 * converge in the store's `ON CONFLICT DO NOTHING`.
 */
export async function submit(deps: NativeDeps, req: FastifyRequest, reply: FastifyReply, m: Mutation): Promise<FastifyReply> {
  const key = idempotencyKey(req);
  if (key !== null) {
    try {
      const existing = await findReplay(deps.db, { tenantId: m.tenantId, idempotencyKey: key, kind: m.kind, request: m.request });
      if (existing) return sendOperation(reply, existing, true);
    } catch (e: unknown) {
      if (!hasDetail(e, "idempotency_conflict")) throw e;
      const { operationId, kind } = e.details ?? {};
      return sendIdempotencyConflict(reply, key, { id: String(operationId), kind: String(kind) });
    }
  }
  await m.admit?.();
  const held = (await m.reserve?.()) ?? null;
  try {
    const input = {
      tenantId: m.tenantId,
      kind: m.kind,
      targetId: held?.target ?? m.target,
      request: m.request,
      idempotencyKey: key,
      ...(m.deadlineMs !== null ? { deadlineMs: m.deadlineMs } : {}),
      traceParent: currentTraceParent(),
    };
    const also = m.also;
    // One statement needs no explicit transaction (one round trip less on the hot path).
    const { operation, replayed } = also
      ? await deps.db.transaction(async (tx) => {
          const r = await enqueueOperation(tx, input);
          if (!r.replayed) await also(tx, r.operation, key);
          return r;
        })
      : await enqueueOperation(deps.db, input);
    if (replayed) await held?.release();
    return sendOperation(reply, operation, replayed);
  } catch (e: unknown) {
    await held?.release();
    if (key !== null && hasDetail(e, "idempotency_conflict")) return sendIdempotencyConflict(reply, key);
    throw e;
  }
}
