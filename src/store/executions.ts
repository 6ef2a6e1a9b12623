/** Executions: one per activation attempt of a sandbox on a node. */
import { SpaceError } from "../core/errors.ts";
import { newExecutionId, type ExecutionId, type NodeId } from "../core/ids.ts";
import type { Queryable } from "./db.ts";
import { columns, isUniqueViolation } from "./sql.ts";

export const executionStates = ["pending", "starting", "running", "stopping", "ended", "failed"] as const;
export type ExecutionState = (typeof executionStates)[number];
export const activeExecutionStates: readonly ExecutionState[] = ["pending", "starting", "running", "stopping"];

export interface Execution {
  id: ExecutionId;
  sandboxId: string;
  nodeId: NodeId | null;
  attempt: number;
  state: ExecutionState;
  error: string | null;
  createdAt: Date;
  startedAt: Date | null;
  endedAt: Date | null;
}

const COLS = columns(["id", "sandbox_id", "node_id", "attempt", "state", "error", "created_at", "started_at", "ended_at"]);

/** Creates the next attempt (1, 2, …) of `sandboxId`; aborted if another attempt raced it. */
export async function createExecution(q: Queryable, input: { sandboxId: string; nodeId?: NodeId | null; id?: ExecutionId }): Promise<Execution> {
  try {
    return await q.one<Execution>(
      `INSERT INTO executions (id, sandbox_id, node_id, attempt)
       SELECT $1, $2, $3, coalesce(max(attempt), 0) + 1 FROM executions WHERE sandbox_id = $2
       RETURNING ${COLS}`,
      [input.id ?? newExecutionId(), input.sandboxId, input.nodeId ?? null],
    );
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("aborted", `another execution of sandbox ${input.sandboxId} was created concurrently`);
    throw e;
  }
}

export async function getExecution(q: Queryable, id: string): Promise<Execution> {
  return q.one<Execution>(`SELECT ${COLS} FROM executions WHERE id = $1`, [id], `execution ${id}`);
}

/** The latest attempt of a sandbox, if any. */
export async function latestExecution(q: Queryable, sandboxId: string): Promise<Execution | undefined> {
  return q.maybeOne<Execution>(`SELECT ${COLS} FROM executions WHERE sandbox_id = $1 ORDER BY attempt DESC LIMIT 1`, [sandboxId]);
}

export async function listExecutions(q: Queryable, sandboxId: string): Promise<Execution[]> {
  return q.query<Execution>(`SELECT ${COLS} FROM executions WHERE sandbox_id = $1 ORDER BY attempt`, [sandboxId]);
}

/** Active executions on a node (node reconcile after restart). */
export async function listActiveExecutionsOnNode(q: Queryable, nodeId: NodeId): Promise<Execution[]> {
  return q.query<Execution>(`SELECT ${COLS} FROM executions WHERE node_id = $1 AND state = ANY($2::text[]) ORDER BY created_at`, [
    nodeId,
    [...activeExecutionStates],
  ]);
}

/**
 * Moves an execution from one of `from` to `to`; `started_at` is set on `running`,
 * `ended_at` on `ended`/`failed`. failed_precondition when it is not in `from`.
 */
export async function transitionExecution(
  q: Queryable,
  id: string,
  from: readonly ExecutionState[],
  to: ExecutionState,
  patch: { nodeId?: NodeId | null; error?: string | null } = {},
): Promise<Execution> {
  const row = await q.maybeOne<Execution>(
    `UPDATE executions SET state = $3,
        node_id = CASE WHEN $4::boolean THEN $5::uuid ELSE node_id END,
        error = CASE WHEN $6::boolean THEN $7 ELSE error END,
        started_at = CASE WHEN $3 = 'running' THEN coalesce(started_at, now()) ELSE started_at END,
        ended_at = CASE WHEN $3 IN ('ended', 'failed') THEN coalesce(ended_at, now()) ELSE ended_at END
      WHERE id = $1 AND state = ANY($2::text[]) RETURNING ${COLS}`,
    [id, [...from], to, patch.nodeId !== undefined, patch.nodeId ?? null, patch.error !== undefined, patch.error ?? null],
  );
  if (row) return row;
  const cur = await q.maybeOne<Execution>(`SELECT ${COLS} FROM executions WHERE id = $1`, [id]);
  if (!cur) throw new SpaceError("not_found", `execution ${id} not found`);
  throw new SpaceError("failed_precondition", `execution ${id} is ${cur.state}, cannot move to ${to}`, { details: { state: cur.state } });
}
