/**
 * Commands run in sandboxes (Native API) and their output, as rows: `commands` and
 * append-only `command_output` chunks. Written by the command handler, read by the API
 * (paging and follow). The (command, seq) pair is the page cursor.
 */
import { randomId } from "../../core/ids.ts";
import { notify, type Queryable } from "../../store/db.ts";

/** NOTIFY channel: payload = command id that got output or ended (followers wake). */
export const COMMAND_OUTPUT_CHANNEL = "space_command_output";

export const newCommandId = () => `cmd_${randomId(20)}`;

export type CommandRowState = "queued" | "running" | "exited" | "failed" | "killed";

export interface CommandSpec {
  cmd: string;
  args: string[];
  cwd?: string;
  env?: Record<string, string>;
  user?: string;
  timeoutS?: number;
}

export interface CommandRow {
  id: string;
  tenantId: string | null;
  sandboxId: string;
  operationId: string | null;
  idempotencyKey: string | null;
  pid: number | null;
  cmd: CommandSpec;
  state: CommandRowState;
  exitCode: number | null;
  error: string | null;
  outputBytes: number;
  outputChunks: number;
  createdAt: Date;
  startedAt: Date | null;
  endedAt: Date | null;
}

const COLS = `id, tenant_id AS "tenantId", sandbox_id AS "sandboxId", operation_id AS "operationId",
  idempotency_key AS "idempotencyKey", pid, cmd, state, exit_code AS "exitCode", error,
  output_bytes AS "outputBytes", output_chunks AS "outputChunks", created_at AS "createdAt",
  started_at AS "startedAt", ended_at AS "endedAt"`;

export const isCommandDone = (s: CommandRowState) => s === "exited" || s === "failed" || s === "killed";

export async function insertCommand(
  q: Queryable,
  c: { id: string; tenantId: string; sandboxId: string; operationId: string; idempotencyKey: string | null; spec: CommandSpec },
): Promise<void> {
  await q.execute(
    `INSERT INTO commands (id, tenant_id, sandbox_id, operation_id, idempotency_key, cmd) VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
    [c.id, c.tenantId, c.sandboxId, c.operationId, c.idempotencyKey, JSON.stringify(c.spec)],
  );
}

export function getCommand(q: Queryable, tenantId: string | null, sandboxId: string, id: string): Promise<CommandRow | undefined> {
  return q.maybeOne<CommandRow>(
    `SELECT ${COLS} FROM commands WHERE id = $1 AND sandbox_id = $2 AND ($3::text IS NULL OR tenant_id = $3::text)`,
    [id, sandboxId, tenantId],
  );
}

export function getCommandById(q: Queryable, id: string): Promise<CommandRow | undefined> {
  return q.maybeOne<CommandRow>(`SELECT ${COLS} FROM commands WHERE id = $1`, [id]);
}

/** queued → running with its pid (also re-records the pid after a reattach). */
export async function markRunning(q: Queryable, id: string, pid: number): Promise<void> {
  await q.execute(
    `UPDATE commands SET state = 'running', pid = $2, started_at = coalesce(started_at, now()) WHERE id = $1 AND state IN ('queued', 'running')`,
    [id, pid],
  );
}

/** Appends one chunk; seq and byte offset come from the command row (one writer per command). */
export async function appendOutput(q: Queryable, id: string, stream: "stdout" | "stderr" | "pty", data: Uint8Array): Promise<void> {
  await q.execute(
    `WITH c AS (
       UPDATE commands SET output_chunks = output_chunks + 1, output_bytes = output_bytes + $3
        WHERE id = $1
        RETURNING output_chunks - 1 AS seq, output_bytes - $3 AS off)
     INSERT INTO command_output (command_id, seq, stream, offset_bytes, data)
     SELECT $1, seq, $2, off, $4 FROM c`,
    [id, stream, data.byteLength, data],
  );
  await notify(q, COMMAND_OUTPUT_CHANNEL, id);
}

export async function finishCommand(q: Queryable, id: string, state: "exited" | "failed" | "killed", exitCode: number | null, error: string | null): Promise<void> {
  await q.execute(
    `UPDATE commands SET state = $2, exit_code = $3, error = $4, ended_at = now()
      WHERE id = $1 AND state IN ('queued', 'running')`,
    [id, state, exitCode, error],
  );
  await notify(q, COMMAND_OUTPUT_CHANNEL, id);
}

export interface OutputRow {
  seq: number;
  stream: "stdout" | "stderr" | "pty";
  offset: number;
  data: Uint8Array;
}

export function readOutput(q: Queryable, id: string, afterSeq: number, limit: number): Promise<OutputRow[]> {
  return q.query<OutputRow>(
    `SELECT seq, stream, offset_bytes AS "offset", data FROM command_output
      WHERE command_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
    [id, afterSeq, limit],
  );
}
