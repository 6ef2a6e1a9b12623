/**
 * Public operations (behaviours.md A): rows `queued → claimed → succeeded | failed`.
 *
 * - Idempotency: (tenant, idempotency key) is unique. The same key with the same request
 *   (sha256 of canonical JSON) returns the existing operation (`replayed: true`, also after
 *   it completed); with another request it is `aborted` with detail `idempotency_conflict`. Concurrent
 *   duplicates converge through the unique index + `ON CONFLICT DO NOTHING`.
 * - Enqueue sends `NOTIFY space_operations` (payload: id) so a dispatcher wakes at once;
 *   completion sends `NOTIFY space_operation_done`.
 * - Claim takes N queued (or claimed-but-stale) rows `FOR UPDATE SKIP LOCKED`: two
 *   claimers never get the same row; a claimer whose heartbeat went silent loses it.
 * - Complete/fail are fenced by the claimer: a worker that lost its claim cannot finish it.
 */
import { createHash } from "node:crypto";
import { SpaceError, idempotencyConflict, type OperationFailureCode } from "../core/errors.ts";
import { newOperationId, type OperationId, type TenantId } from "../core/ids.ts";
import { notify, type Db, type Queryable } from "./db.ts";
import { columns, decodeCursor, encodeCursor, isUniqueViolation, json, pageLimit } from "./sql.ts";

export const OPERATIONS_CHANNEL = "space_operations";
export const OPERATION_DONE_CHANNEL = "space_operation_done";

export const operationStates = ["queued", "claimed", "succeeded", "failed"] as const;
export type OperationState = (typeof operationStates)[number];

export interface Operation<Req = unknown, Res = unknown> {
  id: OperationId;
  tenantId: TenantId | null;
  kind: string;
  targetId: string | null;
  request: Req;
  requestHash: string;
  idempotencyKey: string | null;
  state: OperationState;
  claimedBy: string | null;
  claimCount: number;
  claimedAt: Date | null;
  heartbeatAt: Date | null;
  queuedAt: Date;
  succeededAt: Date | null;
  failedAt: Date | null;
  deadlineAt: Date | null;
  result: Res | null;
  failureCode: OperationFailureCode | null;
  failureMessage: string | null;
  seq: number;
  /** W3C traceparent of the request that queued it (null: tracing off). */
  traceParent: string | null;
}

const COLUMN_NAMES = [
  "id", "tenant_id", "kind", "target_id", "request", "request_hash", "idempotency_key", "state", "claimed_by", "claim_count",
  "claimed_at", "heartbeat_at", "queued_at", "succeeded_at", "failed_at", "deadline_at", "result", "failure_code",
  "failure_message", "seq", "trace_parent",
] as const;
const COLS = columns(COLUMN_NAMES);

/** Canonical JSON (object keys sorted, undefined dropped) → sha256 hex. */
export function requestHash(request: unknown): string {
  return createHash("sha256").update(canonicalJson(request)).digest("hex");
}
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v ?? null);
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? "null" : canonicalJson(x))).join(",")}]`;
  if (v instanceof Date) return JSON.stringify(v.toISOString());
  const entries = Object.entries(v as Record<string, unknown>)
    .filter(([, x]) => x !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(",")}}`;
}

export interface EnqueueInput {
  tenantId: TenantId | null;
  kind: string;
  targetId?: string | null;
  request: unknown;
  idempotencyKey?: string | null;
  /** Absolute deadline, or… */
  deadlineAt?: Date | null;
  /** …relative to now (database clock). */
  deadlineMs?: number;
  id?: OperationId;
  /** The queuing request's W3C traceparent (core/tracing.ts). */
  traceParent?: string | null;
}

/**
 * Enqueues an operation, or returns the one already recorded under the same idempotency key.
 * Call with the pool or inside a transaction (then NOTIFY is delivered at COMMIT). Callers that
 * insert rows alongside (e.g. the sandbox of a create) must do so only when `replayed` is false.
 */
export async function enqueueOperation<Req = unknown>(
  q: Queryable,
  input: EnqueueInput & { request: Req },
): Promise<{ operation: Operation<Req>; replayed: boolean }> {
  const hash = requestHash(input.request);
  const key = input.idempotencyKey ?? null;
  if (key !== null && (key.length === 0 || key.length > 255)) {
    throw new SpaceError("invalid_argument", `idempotency key must be 1 to 255 characters, got ${key.length}`, { details: { field: "Idempotency-Key" } });
  }
  const params = [
    input.id ?? newOperationId(), input.tenantId, input.kind, input.targetId ?? null, json(input.request), hash, key,
    input.deadlineAt ?? null, input.deadlineMs ?? null, input.traceParent ?? null,
  ];
  let inserted: Operation<Req> | undefined;
  try {
    // The NOTIFY rides in the same statement: one round trip less before a dispatcher can claim it.
    // queued_at is the instant the row is written (clock_timestamp), not the statement's start
    // (now(): before parsing and planning, which take PGlite over a millisecond): the queue wait
    // then starts when the operation exists, and ends at the claim statement's start.
    inserted = await q.maybeOne<Operation<Req>>(
      `WITH ins AS (
         INSERT INTO operations (id, tenant_id, kind, target_id, request, request_hash, idempotency_key, deadline_at, queued_at, trace_parent)
         VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7,
                 coalesce($8::timestamptz, now() + $9::bigint * interval '1 millisecond'), clock_timestamp(), $10)
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
         RETURNING *)
       SELECT ${COLS}, pg_notify('${OPERATIONS_CHANNEL}', ins.id) AS notified FROM ins`,
      params,
    );
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `operation ${String(params[0])} already exists`);
    throw e;
  }
  if (inserted) {
    delete (inserted as { notified?: unknown }).notified;
    return { operation: inserted, replayed: false };
  }
  // Conflict on (tenant, key): the row is committed (ON CONFLICT waited for its inserter).
  const existing = await findReplay<Req>(q, { tenantId: input.tenantId, idempotencyKey: key!, kind: input.kind, request: input.request });
  if (!existing) throw new SpaceError("aborted", `operation with idempotency key ${JSON.stringify(key)} vanished; retry`);
  return { operation: existing, replayed: true };
}

/**
 * The operation recorded under the tenant's idempotency key, which a request with that key
 * replays; undefined when the key is new. The one idempotency check: the key used before
 * with another kind or request is an idempotency conflict (detail `idempotency_conflict`,
 * `details.operationId` and `details.kind` name the existing operation).
 */
export async function findReplay<Req = unknown>(
  q: Queryable,
  r: { tenantId: TenantId | null; idempotencyKey: string; kind: string; request: unknown },
): Promise<Operation<Req> | undefined> {
  // `=` (not IS NOT DISTINCT FROM) so the lookup uses the (tenant_id, idempotency_key) index.
  const existing =
    r.tenantId === null
      ? await q.maybeOne<Operation<Req>>(`SELECT ${COLS} FROM operations WHERE tenant_id IS NULL AND idempotency_key = $1`, [r.idempotencyKey])
      : await q.maybeOne<Operation<Req>>(`SELECT ${COLS} FROM operations WHERE tenant_id = $1 AND idempotency_key = $2`, [r.tenantId, r.idempotencyKey]);
  if (existing && (existing.kind !== r.kind || existing.requestHash !== requestHash(r.request))) {
    throw idempotencyConflict({ idempotencyKey: r.idempotencyKey, operationId: existing.id, kind: existing.kind });
  }
  return existing;
}

/**
 * Hands claimed operations back to the queue (a stopping dispatcher), so the next claimer
 * starts them at once instead of after the staleness window.
 */
export async function releaseOperations(q: Queryable, claimer: string, ids: readonly string[]): Promise<void> {
  if (ids.length === 0) return;
  await q.execute(
    `UPDATE operations SET state = 'queued', claimed_by = NULL, heartbeat_at = NULL
      WHERE claimed_by = $1 AND state = 'claimed' AND id = ANY($2::text[])`,
    [claimer, [...ids]],
  );
}

/** Points the operation at another target (a create whose sandbox got a new id on a re-run). */
export async function retargetOperation(q: Queryable, id: string, targetId: string): Promise<void> {
  await q.execute(`UPDATE operations SET target_id = $2 WHERE id = $1`, [id, targetId]);
}

/** The operation (of `tenantId` when given), or not_found. */
export async function getOperation<Req = unknown, Res = unknown>(q: Queryable, id: string, tenantId?: TenantId): Promise<Operation<Req, Res>> {
  const op =
    tenantId === undefined
      ? await q.maybeOne<Operation<Req, Res>>(`SELECT ${COLS} FROM operations WHERE id = $1`, [id])
      : await q.maybeOne<Operation<Req, Res>>(`SELECT ${COLS} FROM operations WHERE id = $1 AND tenant_id = $2`, [id, tenantId]);
  if (!op) throw new SpaceError("not_found", `operation ${id} not found`);
  return op;
}

export interface OperationListFilter {
  /** "any": every tenant's and the cluster's (the Admin API); never a default. */
  tenantId: TenantId | "any";
  states?: readonly OperationState[];
  kind?: string;
  targetId?: string;
  order?: "asc" | "desc";
  limit?: number;
  cursor?: string;
}

/** Keyset pages over (queued_at, seq), like sandboxes. */
export async function listOperations(q: Queryable, f: OperationListFilter): Promise<{ items: Operation[]; nextCursor: string | null }> {
  const params: unknown[] = [];
  const where: string[] = [];
  if (f.tenantId !== "any") {
    params.push(f.tenantId);
    where.push("tenant_id = $1");
  }
  if (f.states) {
    params.push([...f.states]);
    where.push(`state = ANY($${params.length}::text[])`);
  }
  if (f.kind !== undefined) {
    params.push(f.kind);
    where.push(`kind = $${params.length}`);
  }
  if (f.targetId !== undefined) {
    params.push(f.targetId);
    where.push(`target_id = $${params.length}`);
  }
  const desc = f.order === "desc";
  if (f.cursor) {
    const c = decodeCursor(f.cursor);
    params.push(c.at, c.seq);
    where.push(`(queued_at, seq) ${desc ? "<" : ">"} ($${params.length - 1}::timestamptz, $${params.length}::bigint)`);
  }
  const limit = pageLimit(f.limit);
  params.push(limit + 1);
  const dir = desc ? "DESC" : "ASC";
  const rows = await q.query<Operation & { cursorAt: string }>(
    `SELECT ${COLS}, queued_at::text AS "cursorAt" FROM operations ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
      ORDER BY queued_at ${dir}, seq ${dir} LIMIT $${params.length}`,
    params,
  );
  const more = rows.length > limit;
  const page = more ? rows.slice(0, limit) : rows;
  const last = page[page.length - 1];
  return {
    items: page.map(({ cursorAt: _, ...o }) => o as Operation),
    nextCursor: more && last ? encodeCursor({ at: last.cursorAt, seq: last.seq }) : null,
  };
}

export interface ClaimInput {
  /** Worker identity (e.g. `controller-<host>-<pid>`); fences complete/fail. */
  claimer: string;
  limit: number;
  /** A claimed operation whose heartbeat is older than this is claimable again. */
  staleMs: number;
  /** Only these kinds (default: all). */
  kinds?: readonly string[];
}

/**
 * claimOperations on the pool, committed on Postgres without waiting for its WAL flush: a
 * claim lost in a crash leaves the row queued (or stale-claimed), which is re-claimed and
 * re-run safely (handlers are re-runnable). Saves one fsync (~3 ms) on every pickup.
 */
export async function claimOperationsUnsynced(db: Db, c: ClaimInput): Promise<Operation[]> {
  if (db.engine !== "postgres") return claimOperations(db, c);
  return db.transaction(async (tx) => {
    await tx.execute("SET LOCAL synchronous_commit = off");
    return claimOperations(tx, c);
  });
}

/** Claims up to `limit` operations, oldest first; concurrent claimers never share a row. */
export async function claimOperations(q: Queryable, c: ClaimInput): Promise<Operation[]> {
  const params: unknown[] = [c.claimer, c.staleMs, c.limit];
  let kindFilter = "";
  if (c.kinds) {
    params.push([...c.kinds]);
    kindFilter = `AND kind = ANY($4::text[])`;
  }
  const rows = await q.query<Operation>(
    // now() is when the claim began. On Postgres the claim is a transaction whose start may
    // precede the commit of an operation its statement then sees: never before queued_at.
    `UPDATE operations SET state = 'claimed', claimed_by = $1, claimed_at = greatest(now(), queued_at), heartbeat_at = now(),
            claim_count = claim_count + 1
      WHERE id IN (
        SELECT id FROM operations
         WHERE (state = 'queued' OR (state = 'claimed' AND heartbeat_at < now() - $2::bigint * interval '1 millisecond'))
           ${kindFilter}
         ORDER BY queued_at, seq
         LIMIT $3
         FOR UPDATE SKIP LOCKED)
      RETURNING ${COLS}`,
    params,
  );
  return rows.sort((a, b) => a.seq - b.seq);
}

/** Keeps `ids` claimed by `claimer`; returns the ids still held (the others were lost). */
export async function heartbeatOperations(q: Queryable, claimer: string, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const rows = await q.query<{ id: string }>(
    `UPDATE operations SET heartbeat_at = now() WHERE id = ANY($1::text[]) AND state = 'claimed' AND claimed_by = $2 RETURNING id`,
    [[...ids], claimer],
  );
  return rows.map((r) => r.id);
}

/**
 * Marks a claimed operation succeeded with `result`. With `claimer`, only if still held by
 * it (else aborted: another worker re-claimed it). Idempotent: succeeding an operation that
 * already succeeded returns it unchanged.
 */
export async function completeOperation<Res = unknown>(q: Queryable, id: string, result: Res, opts: { claimer?: string } = {}): Promise<Operation<unknown, Res>> {
  const row = await q.maybeOne<Operation<unknown, Res>>(
    `UPDATE operations SET state = 'succeeded', succeeded_at = now(), result = $2::jsonb
      WHERE id = $1 AND state = 'claimed' AND ($3::text IS NULL OR claimed_by = $3) RETURNING ${COLS}`,
    [id, json(result), opts.claimer ?? null],
  );
  if (row) {
    await notify(q, OPERATION_DONE_CHANNEL, id);
    return row;
  }
  return explainFinishMiss<Res>(q, id, "succeeded", opts.claimer);
}

/**
 * Marks an operation failed (queued or claimed; with `claimer`, only if held by it).
 * Idempotent on an already-failed operation.
 */
export async function failOperation(
  q: Queryable,
  id: string,
  failure: { code: OperationFailureCode; message: string },
  opts: { claimer?: string } = {},
): Promise<Operation> {
  const row = await q.maybeOne<Operation>(
    `UPDATE operations SET state = 'failed', failed_at = now(), failure_code = $2, failure_message = $3
      WHERE id = $1 AND (state = 'queued' OR state = 'claimed') AND ($4::text IS NULL OR claimed_by = $4) RETURNING ${COLS}`,
    [id, failure.code, failure.message, opts.claimer ?? null],
  );
  if (row) {
    await notify(q, OPERATION_DONE_CHANNEL, id);
    return row;
  }
  return explainFinishMiss(q, id, "failed", opts.claimer);
}

async function explainFinishMiss<Res>(q: Queryable, id: string, wanted: OperationState, claimer: string | undefined): Promise<Operation<unknown, Res>> {
  const cur = await q.maybeOne<Operation<unknown, Res>>(`SELECT ${COLS} FROM operations WHERE id = $1`, [id]);
  if (!cur) throw new SpaceError("not_found", `operation ${id} not found`);
  if (cur.state === wanted) return cur;
  if (cur.state === "claimed" && claimer !== undefined && cur.claimedBy !== claimer) {
    throw new SpaceError("aborted", `operation ${id} is now claimed by ${cur.claimedBy}, not ${claimer}`, { retryable: false });
  }
  throw new SpaceError("failed_precondition", `operation ${id} is ${cur.state}, cannot become ${wanted}`, { details: { state: cur.state } });
}

/** Fails queued/claimed operations whose deadline passed (`deadline_exceeded`). Returns them. */
export async function expireOperations(q: Queryable, limit = 100): Promise<Operation[]> {
  const rows = await q.query<Operation>(
    `UPDATE operations SET state = 'failed', failed_at = now(), failure_code = 'deadline_exceeded',
            failure_message = 'the operation did not finish before its deadline ' || to_char(deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
      WHERE id IN (SELECT id FROM operations WHERE state IN ('queued', 'claimed') AND deadline_at IS NOT NULL AND deadline_at <= now()
                   ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED)
      RETURNING ${COLS}`,
    [limit],
  );
  for (const r of rows) await notify(q, OPERATION_DONE_CHANNEL, r.id);
  return rows;
}

export const isOperationDone = (op: Pick<Operation, "state">) => op.state === "succeeded" || op.state === "failed";

/**
 * Waits until the operation is succeeded or failed, woken by NOTIFY and polling every
 * `pollMs` as a safety net. Returns the operation as it is when done or at `timeoutMs`
 * (check `isOperationDone`). Rejects with `canceled` when `signal` aborts.
 */
export async function waitForOperation(
  db: Db,
  id: string,
  opts: { timeoutMs: number; tenantId?: TenantId; signal?: AbortSignal; pollMs?: number },
): Promise<Operation> {
  let wake: (() => void) | undefined;
  const unlisten = await db.listen(OPERATION_DONE_CHANNEL, (payload) => {
    if (payload === id) wake?.();
  });
  const deadline = Date.now() + opts.timeoutMs;
  try {
    for (;;) {
      const op = await getOperation(db, id, opts.tenantId);
      if (isOperationDone(op) || Date.now() >= deadline) return op;
      if (opts.signal?.aborted) throw new SpaceError("canceled", `wait for operation ${id} canceled`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.min(opts.pollMs ?? 1000, Math.max(0, deadline - Date.now())));
        const onAbort = () => done();
        opts.signal?.addEventListener("abort", onAbort, { once: true });
        function done() {
          clearTimeout(t);
          opts.signal?.removeEventListener("abort", onAbort);
          wake = undefined;
          resolve();
        }
        wake = done;
      });
    }
  } finally {
    await unlisten();
  }
}
