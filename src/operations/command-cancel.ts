/**
 * `command.cancel`: signals a running command (SIGKILL by default) through envd; a
 * command still queued is marked killed so its run never starts. Cancelling an ended
 * command succeeds and reports its final state (idempotent).
 */
import { SpaceError, notFound } from "../core/errors.ts";
import type { SandboxId } from "../core/ids.ts";
import { ENVD_PORT } from "../contract/node-api.ts";
import { Signal } from "../gen/process/process_pb.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";
import { cancelQueuedCommand, finishedCommandStates, getCommand } from "../store/commands.ts";
import { COMMAND_OUTPUT_CHANNEL } from "./command-run.ts";
import { fromConnectError, processClient } from "./envd-process-client.ts";
import { readRequest } from "./operation-kind.ts";
import { toCommandOutcome } from "./results.ts";

export function commandCancel(deps: HandlerDeps): OperationHandler {
  const { db, sandboxes: svc } = deps;
  return async ({ op, signal }) => {
    const req = readRequest("command.cancel", op.request);
    const cmd = await getCommand(db, req.command_id, req.sandbox_id);
    if (cmd.tenantId !== op.tenantId) throw notFound(`command ${req.command_id} not found`);
    if (finishedCommandStates.includes(cmd.state)) return toCommandOutcome(cmd);
    if (cmd.pid === null) {
      // Only a command that has not started is marked here (the store's finishCommand
      // would also end a running one without signalling it).
      const cancelled = await cancelQueuedCommand(db, cmd.id);
      await db.notify(COMMAND_OUTPUT_CHANNEL, cmd.id).catch(() => {});
      const row = await getCommand(db, cmd.id);
      if (cancelled || row.pid === null || finishedCommandStates.includes(row.state)) return toCommandOutcome(row);
      cmd.pid = row.pid; // it started meanwhile: signal it below
    }
    const pid = cmd.pid;
    const sb = await svc.repo.getById(cmd.sandboxId as SandboxId);
    if (!sb?.nodeId || sb.state !== "running") throw new SpaceError("failed_precondition", `sandbox ${cmd.sandboxId} is ${sb?.state ?? "gone"}; cannot signal its command`);
    const client = processClient(await svc.substrate.proxyTarget({ sandboxId: sb.id, nodeId: sb.nodeId }, ENVD_PORT, signal), { accessToken: sb.envdAccessToken });
    try {
      await client.sendSignal(
        { process: { selector: { case: "pid", value: pid } }, signal: req.signal === "SIGTERM" ? Signal.SIGTERM : Signal.SIGKILL },
        { signal },
      );
    } catch (e: unknown) {
      const err = fromConnectError(e, `cancel command ${cmd.id}`);
      if (err.code !== "not_found") throw err; // not_found: it ended meanwhile
    }
    return { command_id: cmd.id, signal: req.signal };
  };
}
