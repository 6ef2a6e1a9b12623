/**
 * `sandbox.delete`: ends the sandbox through the shared service. Re-runnable: a sandbox
 * this operation already killed (the previous claimer died after the kill) is done.
 */
import { notFound } from "../core/errors.ts";
import type { SandboxId, TenantId } from "../core/ids.ts";
import { isLive } from "../sandboxes/model.ts";
import { toSandbox } from "./results.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";
import { readRequest } from "./operation-kind.ts";

export function sandboxDelete(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op }) => {
    const { sandbox_id: id } = readRequest("sandbox.delete", op.request);
    const tenantId = op.tenantId as TenantId;
    const rec = await svc.repo.get(tenantId, id as SandboxId);
    if (!rec) throw notFound(`sandbox ${id} not found`);
    if (!isLive(rec.state)) {
      if (op.claimCount > 1 && rec.state === "killed") return toSandbox(rec);
      throw notFound(`sandbox ${id} not found (it is ${rec.state})`);
    }
    await svc.kill(tenantId, id, "deleted by request (native)");
    const after = await svc.repo.get(tenantId, id as SandboxId);
    return after ? toSandbox(after) : { id, state: "killed" };
  };
}
