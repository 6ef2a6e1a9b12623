/**
 * Public operations as rows: `queued → claimed → succeeded | failed` (behaviours.md A).
 * Shared by the Native API (enqueue, read, wait) and the dispatcher (claim, heartbeat,
 * finish). One SQL text per statement, identical on Postgres and PGlite.
 *
 * Fencing: a claim bumps `claim_count`; heartbeat and finish match
 * `(id, state='claimed', claimed_by, claim_count)`, so a worker whose claim went stale
 * and was re-claimed elsewhere can neither extend nor finish it (zero rows = lost).
 */
import { createHash } from "node:crypto";
import { SpaceError, type OperationFailureCode } from "../../core/errors.ts";
import { newOperationId } from "../../core/ids.ts";
import { notify, type Db, type Queryable } from "../../store/db.ts";

/** NOTIFY channel: payload = id of an operation that became claimable. */
export const OPERATIONS_CHANNEL = "space_operations";
/** NOTIFY channel: payload = id of an operation that reached a terminal state. */
export const OPERATIONS_DONE_CHANNEL = "space_operations_done";

export type OperationRowState = "queued" | "claimed" | "succeeded" | "failed";

export interface OperationRow {
  id: string;
  tenantId: string | null;
  kind: string;
  targetId: string | null;
  request: unknown;
  requestHash: string;
  idempotencyKey: string | null;
  state: OperationRowState;
  claimedBy: string | null;
  claimCount: number;
  claimedAt: Date | null;
  heartbeatAt: Date | null;
  queuedAt: Date;
  succeededAt: Date | null;
  failedAt: Date | null;
  deadlineAt: Date | null;
  result: unknown;
  failureCode: OperationFailureCode | null;
  failureMessage: string | null;
  seq: number;
}

const COLS = `id, tenant_id AS "tenantId", kind, target_id AS "targetId", request, request_hash AS "requestHash",
  idempotency_key AS "idempotencyKey", state, claimed_by AS "claimedBy", claim_count AS "claimCount",
  claimed_at AS "claimedAt", heartbeat_at AS "heartbeatAt", queued_at AS "queuedAt", succeeded_at AS "succeededAt",
  failed_at AS "failedAt", deadline_at AS "deadlineAt", result, failure_code AS "failureCode",
  failure_message AS "failureMessage", seq`;

export const isTerminal = (s: OperationRowState) => s === "succeeded" || s === "failed";

/** Canonical JSON (sorted keys) → sha256: the identity of a request for idempotency. */
export function requestHash(v: unknown): string {
  return createHash("sha256").update(canonicalJson(v)).digest("hex");
}

export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v ?? null);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  const entries = Object.entries(v as Record<string, unknown>)
    .filter(([, x]) => x !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(",")}}`;
}

/** Same key, different request: the caller must pick a new key. */
export class IdempotencyConflict extends SpaceError {
  constructor(
    readonly key: string,
    readonly existing: OperationRow,
  ) {
    super(
      "aborted",
      `Idempotency-Key ${JSON.stringify(key)} was already used for a different request (operation ${existing.id}, ${existing.kind}); use a new key`,
      { retryable: false },
    );
  }
}

export interface EnqueueInput {
  tenantId: string;
  kind: string;
  target: string | null;
  /** Stored as the operation's request (what the handler reads). */
  request: unknown;
  /** Identity for idempotency; defaults to `{kind, target, request}` hashed. */
  hash?: string;
  idempotencyKey: string | null;
  /** Deadline from enqueue; null = none. */
  deadlineMs: number | null;
  /** Optional id chosen by the caller (e.g. to name it elsewhere in the same transaction). */
  id?: string;
  /** Runs in the enqueue transaction, only when this call created the operation. */
  also?: (tx: Queryable, op: OperationRow) => Promise<void>;
}

export interface EnqueueResult {
  op: OperationRow;
  /** false: an earlier request with the same key and body (replay). */
  created: boolean;
}

/** The operation of this tenant with this idempotency key, if any. */
export function findByKey(db: Queryable, tenantId: string, key: string): Promise<OperationRow | undefined> {
  return db.maybeOne<OperationRow>(`SELECT ${COLS} FROM operations WHERE tenant_id = $1 AND idempotency_key = $2`, [tenantId, key]);
}

/** Replay or conflict for an existing keyed operation. */
export function checkReplay(existing: OperationRow, hash: string, key: string): OperationRow {
  if (existing.requestHash !== hash) throw new IdempotencyConflict(key, existing);
  return existing;
}

/**
 * Inserts a queued operation and NOTIFYs the dispatchers at commit. With a key,
 * concurrent duplicates converge: `ON CONFLICT DO NOTHING` waits for the first insert to
 * commit, then the loser reads and replays it (or conflicts if the body differs).
 */
export async function enqueue(db: Db, input: EnqueueInput): Promise<EnqueueResult> {
  const hash = input.hash ?? requestHash({ kind: input.kind, target: input.target, request: input.request });
  for (let attempt = 0; attempt < 3; attempt++) {
    const created = await db.transaction(async (tx) => {
      const op = await tx.maybeOne<OperationRow>(
        `INSERT INTO operations (id, tenant_id, kind, target_id, request, request_hash, idempotency_key, deadline_at)
         VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7,
                 CASE WHEN $8::bigint IS NULL THEN NULL ELSE now() + $8::bigint * interval '1 millisecond' END)
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
         RETURNING ${COLS}`,
        [input.id ?? newOperationId(), input.tenantId, input.kind, input.target, JSON.stringify(input.request ?? {}), hash, input.idempotencyKey, input.deadlineMs],
      );
      if (!op) return undefined;
      if (input.also) await input.also(tx, op);
      await notify(tx, OPERATIONS_CHANNEL, op.id);
      return op;
    });
    if (created) return { op: created, created: true };
    // Lost the race to a request with the same key: replay it (or conflict).
    const existing = await findByKey(db, input.tenantId, input.idempotencyKey!);
    if (existing) return { op: checkReplay(existing, hash, input.idempotencyKey!), created: false };
    // The winner rolled back between our insert and read: try again.
  }
  throw new SpaceError("unavailable", `could not record operation with Idempotency-Key ${JSON.stringify(input.idempotencyKey)}; retry`);
}

/** Scoped to a tenant (null = any, for the controller). */
export function getOperation(db: Queryable, tenantId: string | null, id: string): Promise<OperationRow | undefined> {
  return tenantId === null
    ? db.maybeOne<OperationRow>(`SELECT ${COLS} FROM operations WHERE id = $1`, [id])
    : db.maybeOne<OperationRow>(`SELECT ${COLS} FROM operations WHERE id = $1 AND tenant_id = $2`, [id, tenantId]);
}

export interface ListOperationsFilter {
  limit: number;
  /** seq of the last row of the previous page (newest first). */
  beforeSeq?: number;
  state?: string;
  kind?: string;
  target?: string;
}

/** Newest first; one extra row tells whether more follow. */
export async function listOperations(db: Queryable, tenantId: string, f: ListOperationsFilter): Promise<{ items: OperationRow[]; more: boolean }> {
  const rows = await db.query<OperationRow>(
    `SELECT ${COLS} FROM operations
      WHERE tenant_id = $1
        AND ($2::bigint IS NULL OR seq < $2::bigint)
        AND ($3::text IS NULL OR state = $3::text)
        AND ($4::text IS NULL OR kind = $4::text)
        AND ($5::text IS NULL OR target_id = $5::text OR target_id LIKE $5::text || '/%')
      ORDER BY seq DESC LIMIT $6`,
    [tenantId, f.beforeSeq ?? null, f.state ?? null, f.kind ?? null, f.target ?? null, f.limit + 1],
  );
  return { items: rows.slice(0, f.limit), more: rows.length > f.limit };
}

/**
 * Claims up to `limit` operations: queued ones, and claimed ones whose claimer has not
 * heartbeated for `staleMs` (it died). `FOR UPDATE SKIP LOCKED` lets replicas claim
 * concurrently without waiting on or double-claiming each other's rows.
 */
export function claimOperations(db: Queryable, workerId: string, limit: number, staleMs: number): Promise<OperationRow[]> {
  return db.query<OperationRow>(
    `UPDATE operations o
        SET state = 'claimed', claimed_by = $1, claim_count = o.claim_count + 1,
            claimed_at = now(), heartbeat_at = now()
      WHERE o.id IN (
        SELECT id FROM operations
         WHERE state = 'queued'
            OR (state = 'claimed' AND heartbeat_at < now() - $2::bigint * interval '1 millisecond')
         ORDER BY queued_at, seq
         LIMIT $3
         FOR UPDATE SKIP LOCKED)
      RETURNING ${COLS}`,
    [workerId, staleMs, limit],
  );
}

/** Extends the claims this worker still holds; returns the ids it lost. */
export async function heartbeat(db: Queryable, workerId: string, claims: ReadonlyArray<{ id: string; claimCount: number }>): Promise<string[]> {
  if (claims.length === 0) return [];
  const ids = claims.map((c) => c.id);
  const counts = claims.map((c) => c.claimCount);
  const kept = await db.query<{ id: string }>(
    `UPDATE operations o SET heartbeat_at = now()
       FROM (SELECT unnest($2::text[]) AS id, unnest($3::int[]) AS cc) c
      WHERE o.id = c.id AND o.claim_count = c.cc AND o.state = 'claimed' AND o.claimed_by = $1
      RETURNING o.id`,
    [workerId, ids, counts],
  );
  const keptIds = new Set(kept.map((r) => r.id));
  return ids.filter((id) => !keptIds.has(id));
}

export interface Outcome {
  state: "succeeded" | "failed";
  result?: unknown;
  failure?: { code: OperationFailureCode; message: string };
}

/**
 * Ends a claimed operation. Fenced by claimer and claim count: false when this worker
 * no longer holds the claim (its result is dropped; the new claimer decides).
 */
export async function finishOperation(db: Db, claim: { id: string; claimedBy: string; claimCount: number }, out: Outcome): Promise<boolean> {
  return db.transaction(async (tx) => {
    const n = await tx.execute(
      `UPDATE operations
          SET state = $4,
              succeeded_at = CASE WHEN $4 = 'succeeded' THEN now() END,
              failed_at = CASE WHEN $4 = 'failed' THEN now() END,
              result = $5::jsonb, failure_code = $6, failure_message = $7
        WHERE id = $1 AND claimed_by = $2 AND claim_count = $3 AND state = 'claimed'`,
      [claim.id, claim.claimedBy, claim.claimCount, out.state, out.result === undefined ? null : JSON.stringify(out.result), out.failure?.code ?? null, out.failure?.message ?? null],
    );
    if (n === 1) await notify(tx, OPERATIONS_DONE_CHANNEL, claim.id);
    return n === 1;
  });
}

/** Sets the target of an operation (a create learns its sandbox id). */
export async function setTarget(db: Queryable, id: string, target: string): Promise<void> {
  await db.execute(`UPDATE operations SET target_id = $2 WHERE id = $1`, [id, target]);
}

/** Non-terminal operations on a target (for per-target ordering checks and tests). */
export function pendingOnTarget(db: Queryable, target: string): Promise<OperationRow[]> {
  return db.query<OperationRow>(`SELECT ${COLS} FROM operations WHERE target_id = $1 AND state IN ('queued', 'claimed') ORDER BY seq`, [target]);
}
