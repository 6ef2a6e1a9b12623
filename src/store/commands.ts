/**
 * Commands run in sandboxes (Native API). Idempotent by (sandbox, key) like operations.
 * Output is stored as append-only chunks `(command_id, seq)` with each chunk's byte offset
 * in the combined output, so readers page with `afterSeq` and reattach after a restart.
 */
import { SpaceError, idempotencyConflict } from "../core/errors.ts";
import { randomId, type TenantId } from "../core/ids.ts";
import type { Db, Queryable } from "./db.ts";
import { columns, isUniqueViolation, json } from "./sql.ts";
import { canonicalJson } from "./operations.ts";

export const commandStates = ["queued", "running", "exited", "failed", "killed"] as const;
export type CommandState = (typeof commandStates)[number];
export const finishedCommandStates: readonly CommandState[] = ["exited", "failed", "killed"];

export interface CommandSpec {
  cmd: string;
  args?: string[];
  cwd?: string;
  envs?: Record<string, string>;
  user?: string;
  tag?: string;
  [k: string]: unknown;
}

export interface Command {
  id: string;
  tenantId: TenantId | null;
  sandboxId: string;
  operationId: string | null;
  idempotencyKey: string | null;
  pid: number | null;
  cmd: CommandSpec;
  state: CommandState;
  exitCode: number | null;
  error: string | null;
  outputBytes: number;
  outputChunks: number;
  createdAt: Date;
  startedAt: Date | null;
  endedAt: Date | null;
}

export type OutputStream = "stdout" | "stderr" | "pty";
export interface OutputChunk {
  seq: number;
  stream: OutputStream;
  offsetBytes: number;
  data: Uint8Array;
  createdAt: Date;
}

const COLS = columns([
  "id", "tenant_id", "sandbox_id", "operation_id", "idempotency_key", "pid", "cmd", "state", "exit_code", "error", "output_bytes",
  "output_chunks", "created_at", "started_at", "ended_at",
]);

export const newCommandId = () => `cm_${randomId(16)}`;

/**
 * Records a command; with an idempotency key, the same key + same spec returns the existing
 * one (`replayed`), a different spec is aborted / `idempotency_conflict`.
 */
export async function createCommand(
  q: Queryable,
  input: { sandboxId: string; tenantId?: TenantId | null; cmd: CommandSpec; operationId?: string | null; idempotencyKey?: string | null; id?: string },
): Promise<{ command: Command; replayed: boolean }> {
  const key = input.idempotencyKey ?? null;
  let row: Command | undefined;
  try {
    row = await q.maybeOne<Command>(
      `INSERT INTO commands (id, tenant_id, sandbox_id, operation_id, idempotency_key, cmd) VALUES ($1, $2, $3, $4, $5, $6::jsonb)
       ON CONFLICT (sandbox_id, idempotency_key) DO NOTHING RETURNING ${COLS}`,
      [input.id ?? newCommandId(), input.tenantId ?? null, input.sandboxId, input.operationId ?? null, key, json(input.cmd)],
    );
  } catch (e) {
    if (isUniqueViolation(e)) throw new SpaceError("already_exists", `command ${input.id} already exists`);
    throw e;
  }
  if (row) return { command: row, replayed: false };
  const existing = await q.one<Command>(`SELECT ${COLS} FROM commands WHERE sandbox_id = $1 AND idempotency_key = $2`, [input.sandboxId, key], "command");
  if (canonicalJson(existing.cmd) !== canonicalJson(input.cmd)) {
    throw idempotencyConflict({ commandId: existing.id });
  }
  return { command: existing, replayed: true };
}

export async function getCommand(q: Queryable, id: string, sandboxId?: string): Promise<Command> {
  const c =
    sandboxId === undefined
      ? await q.maybeOne<Command>(`SELECT ${COLS} FROM commands WHERE id = $1`, [id])
      : await q.maybeOne<Command>(`SELECT ${COLS} FROM commands WHERE id = $1 AND sandbox_id = $2`, [id, sandboxId]);
  if (!c) throw new SpaceError("not_found", `command ${id} not found`);
  return c;
}

export async function listCommands(q: Queryable, sandboxId: string, states?: readonly CommandState[]): Promise<Command[]> {
  return states
    ? q.query<Command>(`SELECT ${COLS} FROM commands WHERE sandbox_id = $1 AND state = ANY($2::text[]) ORDER BY created_at, id`, [sandboxId, [...states]])
    : q.query<Command>(`SELECT ${COLS} FROM commands WHERE sandbox_id = $1 ORDER BY created_at, id`, [sandboxId]);
}

/** Marks a command running with its pid. */
export async function markCommandRunning(q: Queryable, id: string, pid: number): Promise<Command> {
  return q.one<Command>(
    `UPDATE commands SET state = 'running', pid = $2, started_at = coalesce(started_at, now()) WHERE id = $1 AND state IN ('queued', 'running') RETURNING ${COLS}`,
    [id, pid],
    `queued or running command ${id}`,
  );
}

/** Marks a command finished. Idempotent: an already-finished command is returned unchanged. */
export async function finishCommand(q: Queryable, id: string, end: { state: "exited" | "failed" | "killed"; exitCode?: number | null; error?: string | null }): Promise<Command> {
  const row = await q.maybeOne<Command>(
    `UPDATE commands SET state = $2, exit_code = $3, error = $4, ended_at = now() WHERE id = $1 AND state IN ('queued', 'running') RETURNING ${COLS}`,
    [id, end.state, end.exitCode ?? null, end.error ?? null],
  );
  return row ?? getCommand(q, id);
}

/** Appends one output chunk (serialized per command by the row lock). Returns its seq and offset. */
export async function appendCommandOutput(db: Db, commandId: string, stream: OutputStream, data: Uint8Array): Promise<{ seq: number; offsetBytes: number }> {
  if (data.byteLength === 0) throw new SpaceError("invalid_argument", "empty output chunk");
  return db.transaction(async (tx) => {
    const c = await tx.one<{ seq: number; end: number }>(
      `UPDATE commands SET output_chunks = output_chunks + 1, output_bytes = output_bytes + $2 WHERE id = $1
       RETURNING output_chunks AS seq, output_bytes AS "end"`,
      [commandId, data.byteLength],
      `command ${commandId}`,
    );
    const offsetBytes = c.end - data.byteLength;
    await tx.query(`INSERT INTO command_output (command_id, seq, stream, offset_bytes, data) VALUES ($1, $2, $3, $4, $5)`, [
      commandId,
      c.seq,
      stream,
      offsetBytes,
      Buffer.from(data.buffer, data.byteOffset, data.byteLength),
    ]);
    return { seq: c.seq, offsetBytes };
  });
}

/**
 * One page of output after `afterSeq` (0 = from the start), at most `limit` chunks and about
 * `maxBytes` (always at least one chunk). `nextSeq` is the `afterSeq` of the next page.
 */
export async function readCommandOutput(
  q: Queryable,
  commandId: string,
  opts: { afterSeq?: number; limit?: number; maxBytes?: number; streams?: readonly OutputStream[] } = {},
): Promise<{ chunks: OutputChunk[]; nextSeq: number }> {
  const after = opts.afterSeq ?? 0;
  const rows = await q.query<OutputChunk>(
    `SELECT seq, stream, offset_bytes AS "offsetBytes", data, created_at AS "createdAt" FROM command_output
      WHERE command_id = $1 AND seq > $2 AND ($4::text[] IS NULL OR stream = ANY($4::text[]))
      ORDER BY seq LIMIT $3`,
    [commandId, after, Math.min(opts.limit ?? 256, 10_000), opts.streams ? [...opts.streams] : null],
  );
  const maxBytes = opts.maxBytes ?? 4 * 1024 * 1024;
  const chunks: OutputChunk[] = [];
  let bytes = 0;
  for (const r of rows) {
    if (chunks.length > 0 && bytes + r.data.byteLength > maxBytes) break;
    bytes += r.data.byteLength;
    chunks.push({ ...r, data: new Uint8Array(r.data.buffer, r.data.byteOffset, r.data.byteLength) });
  }
  return { chunks, nextSeq: chunks.length ? chunks[chunks.length - 1]!.seq : after };
}

/**
 * Ends a command that has not started (queued, no pid) as killed; returns whether it did.
 * A command already running is left alone: it must be signalled, not marked.
 */
export async function cancelQueuedCommand(q: Queryable, id: string): Promise<boolean> {
  const n = await q.execute(
    `UPDATE commands SET state = 'killed', error = 'cancelled before it started', ended_at = now()
      WHERE id = $1 AND state = 'queued' AND pid IS NULL`,
    [id],
  );
  return n === 1;
}
