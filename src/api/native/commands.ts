/**
 * /v1/sandboxes/:id/commands: run (an operation that records the command), get, cancel
 * (an operation). Output paging and following live in command-output.ts.
 */
import type { FastifyInstance } from "fastify";
import type { TenantId, SandboxId } from "../../core/ids.ts";
import { notFound } from "../../core/errors.ts";
import { commandTarget } from "../../operations/requests.ts";
import { DEFAULT_COMMAND_TIMEOUT_S } from "../../operations/command-run.ts";
import { createCommand, getCommand, newCommandId, type Command as CommandRow } from "../../store/commands.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, submit, tenantWith } from "./native-edge.ts";
import { toCommand } from "./native-present.ts";
import { DEFAULT_CREATE_DEADLINE_MS, exists } from "./sandboxes.ts";
import { CancelCommandBody, CommandParams, RunCommandBody, SandboxIdParams } from "./native-schemas.ts";

export function registerCommandRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.post("/v1/sandboxes/:id/commands", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "commands:exec");
    const { id } = parse(SandboxIdParams, req.params, "path");
    const body = parse(RunCommandBody, req.body, "body");
    const commandId = newCommandId();
    const timeoutS = body.timeout_s ?? DEFAULT_COMMAND_TIMEOUT_S;
    return submit(deps, req, reply, {
      tenantId,
      kind: "command.run",
      target: commandTarget(id, commandId),
      request: { sandbox_id: id, ...body },
      // The operation outlives the command by a margin so the handler records the timeout itself.
      deadlineMs: Math.max(deps.operationDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS, (timeoutS + 300) * 1000),
      admit: () => exists(deps, tenantId, id),
      also: async (tx, op, key) => {
        await createCommand(tx, {
          id: commandId,
          sandboxId: id,
          tenantId,
          operationId: op.id,
          idempotencyKey: key,
          cmd: {
            cmd: body.cmd,
            args: body.args ?? [],
            ...(body.cwd ? { cwd: body.cwd } : {}),
            ...(body.env ? { envs: body.env } : {}),
            ...(body.user ? { user: body.user } : {}),
            tag: commandId,
            timeout_s: timeoutS,
          },
        });
      },
    });
  });

  app.get("/v1/sandboxes/:id/commands/:cid", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "commands:exec");
    const { id, cid } = parse(CommandParams, req.params, "path");
    return toCommand(await commandOf(deps, tenantId, id, cid));
  });

  app.post("/v1/sandboxes/:id/commands/:cid/cancel", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "commands:exec");
    const { id, cid } = parse(CommandParams, req.params, "path");
    const body = parse(CancelCommandBody, req.body, "body");
    return submit(deps, req, reply, {
      tenantId,
      kind: "command.cancel",
      target: commandTarget(id, cid),
      request: { sandbox_id: id, command_id: cid, signal: body.signal },
      deadlineMs: deps.operationDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS,
      admit: async () => {
        await commandOf(deps, tenantId, id, cid);
      },
    });
  });
}

/** The command of this tenant's sandbox (ended sandboxes keep their commands readable). */
export async function commandOf(deps: NativeDeps, tenantId: TenantId, sandboxId: string, commandId: string): Promise<CommandRow> {
  const sb = await deps.sandboxes.repo.get(tenantId, sandboxId as SandboxId);
  if (!sb) throw notFound(`sandbox ${sandboxId} not found`);
  const cmd = await getCommand(deps.db, commandId, sandboxId).catch(() => undefined);
  if (!cmd || cmd.tenantId !== tenantId) throw notFound(`command ${commandId} not found in sandbox ${sandboxId}`);
  return cmd;
}

export { exists };
