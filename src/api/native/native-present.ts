/**
 * Records → Native wire objects (snake_case, ISO timestamps). One function per noun the
 * routes answer with; what operations end with (a sandbox, a command's outcome, a build)
 * is presented by src/operations/results.ts.
 */
import type { Operation as OperationRow } from "../../store/operations.ts";
import { INTERNAL_MESSAGE } from "../../core/errors.ts";
import type { Command as CommandRow, OutputChunk as OutputRow } from "../../store/commands.ts";
import type { ApiKey as ApiKeyRow } from "../../store/api-keys.ts";
import type { Token as TokenRow } from "../../store/tokens.ts";
import type { ApiKey, Command, Operation, OperationKind, Token } from "./native-schemas.ts";

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

export function toOperation(o: OperationRow): Operation {
  return {
    id: o.id,
    kind: o.kind as OperationKind,
    state: o.state,
    target: o.targetId,
    queued_at: o.queuedAt.toISOString(),
    claimed_at: iso(o.claimedAt),
    succeeded_at: iso(o.succeededAt),
    failed_at: iso(o.failedAt),
    deadline_at: iso(o.deadlineAt),
    result: o.result ?? null,
    // An internal failure's text is for the server log (host paths, library errors).
    failure: o.failureCode ? { code: o.failureCode, message: o.failureCode === "internal" ? INTERNAL_MESSAGE : (o.failureMessage ?? "") } : null,
  };
}

export function toCommand(c: CommandRow): Command {
  return {
    id: c.id,
    sandbox_id: c.sandboxId,
    operation_id: c.operationId,
    state: c.state,
    cmd: c.cmd.cmd,
    args: c.cmd.args ?? [],
    cwd: c.cmd.cwd ?? null,
    user: c.cmd.user ?? null,
    pid: c.pid,
    exit_code: c.exitCode,
    error: c.error,
    output_bytes: c.outputBytes,
    output_chunks: c.outputChunks,
    created_at: c.createdAt.toISOString(),
    started_at: iso(c.startedAt),
    ended_at: iso(c.endedAt),
  };
}

export function toChunk(o: OutputRow) {
  return { seq: o.seq, stream: o.stream, offset: o.offsetBytes, data: Buffer.from(o.data).toString("base64") };
}

export function toApiKey(k: ApiKeyRow): ApiKey {
  return { id: k.id, name: k.name, prefix: k.prefix, created_at: k.createdAt.toISOString(), last_used_at: iso(k.lastUsedAt), revoked_at: iso(k.revokedAt) };
}

export function toToken(t: TokenRow): Token {
  return {
    id: t.id,
    name: t.name,
    prefix: t.prefix,
    scopes: t.scopes,
    created_at: t.createdAt.toISOString(),
    expires_at: iso(t.expiresAt),
    last_used_at: iso(t.lastUsedAt),
    revoked_at: iso(t.revokedAt),
  };
}
