/**
 * The contract between the dispatcher and one operation kind's handler. A handler gets
 * the claimed row and a signal (aborted at the operation's deadline, when the
 * dispatcher stops, or when the claim was lost) and resolves to the operation's result
 * or throws (SpaceError → failure code through toOperationFailure).
 *
 * Every handler must be safe to re-run: a claimer that dies mid-way leaves the row
 * claimed, and after the staleness window another dispatcher runs it again
 * (`op.claimCount > 1` tells the handler it is a re-run).
 */
import type { Logger } from "../core/log.ts";
import type { Operation as OperationRow } from "../store/operations.ts";

export interface OperationContext {
  op: OperationRow;
  signal: AbortSignal;
  log: Logger;
}

export type OperationHandler = (ctx: OperationContext) => Promise<unknown>;

/** kind → handler (any kind: tests run their own); a kind without a handler fails its operations with `internal`. */
export type HandlerMap = Readonly<Record<string, OperationHandler>>;
