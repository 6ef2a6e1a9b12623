/**
 * `space operation list|get|wait`: the Native API's durable operations (`/v1/operations`),
 * what `POST /v1/sandboxes`, builds, pauses and forks answer with. `wait` long-polls
 * (`?wait=30s`, answered the moment the operation ends) until it ends or --timeout passes.
 */
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import type { ApiClient } from "../client/api-client.ts";
import { contextOf } from "../client/context.ts";
import { printFields, printJson, printTable, withSpinner } from "../client/output.ts";
import { positiveInt } from "./sandbox-commands.ts";

export interface Operation {
  id: string;
  kind: string;
  state: "queued" | "claimed" | "succeeded" | "failed";
  target: string | null;
  queued_at: string;
  succeeded_at: string | null;
  failed_at: string | null;
  result: unknown;
  failure: { code: string; message: string } | null;
}

const done = (op: Operation) => op.state === "succeeded" || op.state === "failed";

/** Long-polls an operation until it ends or `deadline` (ms since the epoch) passes; `seen` hears each state. */
export async function pollOperation(client: ApiClient, id: string, deadline: number, seen?: (op: Operation) => void): Promise<Operation> {
  for (;;) {
    const left = Math.max(1, Math.min(30_000, deadline - Date.now()));
    const cur = await client.native<Operation>("GET", `/v1/operations/${encodeURIComponent(id)}`, undefined, { query: { wait: `${left}ms` } });
    seen?.(cur);
    if (done(cur) || Date.now() >= deadline) return cur;
  }
}

/** A failed operation as the error its failure code names (so the exit code follows it, docs/cli.md). */
export function operationFailure(op: Operation): SpaceError {
  const code = op.failure?.code;
  const taxonomy = code === "invalid_request" ? "invalid_argument" : code === "not_found" ? "not_found" : code === "conflict" ? "failed_precondition" : code === "unavailable" ? "unavailable" : code === "deadline_exceeded" ? "deadline_exceeded" : "internal";
  return new SpaceError(taxonomy, `operation ${op.id} (${op.kind}) failed: ${op.failure?.message ?? "no reason given"}`);
}

export function registerOperationCommands(program: Command): void {
  const operation = program
    .command("operation")
    .alias("op")
    .description("Native API operations: list, get, wait")
    .addHelpText("after", "\nExamples:\n  $ space operation list --state failed\n  $ space operation wait op_… --timeout 300");

  operation
    .command("list")
    .alias("ls")
    .description("list operations, newest first")
    .option("--state <state>", "queued, claimed, succeeded or failed")
    .option("--kind <kind>", "e.g. sandbox.create")
    .option("--target <id>", "the sandbox or template it acts on")
    .option("--limit <n>", "at most this many (default 100)", positiveInt("--limit"))
    .action(async (o: { state?: string; kind?: string; target?: string; limit?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const r = await ctx.client.native<{ operations: Operation[]; next_cursor: string | null }>("GET", "/v1/operations", undefined, {
        query: { state: o.state, kind: o.kind, target: o.target, limit: o.limit },
      });
      if (ctx.out.json) return printJson(r);
      printTable(
        ["ID", "KIND", "STATE", "TARGET", "QUEUED", "FAILURE"],
        r.operations.map((op) => [op.id, op.kind, op.state, op.target, op.queued_at, op.failure ? `${op.failure.code}: ${op.failure.message}` : null]),
        "no operations",
      );
    });

  operation
    .command("get <id>")
    .alias("info")
    .description("show one operation")
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const op = await ctx.client.native<Operation>("GET", `/v1/operations/${encodeURIComponent(id)}`);
      if (ctx.out.json) return printJson(op);
      printFields({ ...op });
    });

  operation
    .command("wait <id>")
    .description("wait until an operation ends; exits 1 when it failed or is still running at --timeout")
    .option("--timeout <seconds>", "give up after this long (default 600)", positiveInt("--timeout"))
    .action(async (id: string, o: { timeout?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const deadline = Date.now() + (o.timeout ?? 600) * 1000;
      const op = await withSpinner(ctx.out, `waiting for ${id}`, (spinner) =>
        pollOperation(ctx.client, id, deadline, (cur) => {
          if (spinner) spinner.text = `waiting for ${id} (${cur.kind}: ${cur.state})`;
        }),
      );
      if (ctx.out.json) printJson(op);
      else printFields({ ...op });
      if (op.state === "failed") throw new SpaceError("internal", `operation ${id} failed: ${op.failure?.code ?? "?"}: ${op.failure?.message ?? ""}`);
      if (!done(op)) throw new SpaceError("deadline_exceeded", `operation ${id} is still ${op.state} after ${o.timeout ?? 600} s: wait longer with --timeout`);
    });
}
