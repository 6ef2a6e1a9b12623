/**
 * `sandbox.create`: creates the sandbox through the shared sandbox service (one create
 * behind ECW and Native). The sandbox id is chosen at admission so the operation names
 * its target at once; a re-run (the previous claimer died mid-create) finds that row:
 * running → done; still creating → the half-made sandbox is released and created anew.
 */
import { SpaceError } from "../core/errors.ts";
import type { SandboxId, TenantId } from "../core/ids.ts";
import type { CreateInput } from "../sandboxes/service.ts";
import { toSandbox } from "./results.ts";
import { compileNative } from "../sandboxes/egress-rules.ts";
import { retargetOperation } from "../store/operations.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";
import { readRequest } from "./operation-kind.ts";
import { parseTarget, sandboxTarget, type CreateSandboxBody } from "./requests.ts";

export const DEFAULT_SANDBOX_TIMEOUT_S = 300;

export function toCreateInput(body: CreateSandboxBody): CreateInput {
  const net = body.network;
  // Native policy v1 (deny precedes allow) is compiled here and stored with the sandbox.
  const network = net
    ? {
        ...(net.allow_out ? { allowOut: net.allow_out } : {}),
        ...(net.deny_out ? { denyOut: net.deny_out } : {}),
        ...(net.allow_public_traffic !== undefined ? { allowPublicTraffic: net.allow_public_traffic } : {}),
        spacePolicy: compileNative(net),
      }
    : null;
  return {
    template: body.template,
    metadata: body.metadata ?? {},
    envVars: body.env ?? {},
    timeoutSec: body.timeout_s ?? DEFAULT_SANDBOX_TIMEOUT_S,
    // envd requires the per-sandbox access token: only the control plane (and the
    // gateway, which holds it) can reach a Native sandbox's processes.
    secure: true,
    allowInternetAccess: net?.allow_internet_access ?? true,
    network,
    onTimeout: "kill",
    autoResume: false,
    ...(body.wait_for_capacity ? { waitForCapacity: true } : {}),
    resources: {
      ...(body.vcpu !== undefined ? { vcpu: body.vcpu } : {}),
      ...(body.memory_mib !== undefined ? { memoryMib: body.memory_mib } : {}),
      ...(body.disk_mib !== undefined ? { diskMib: body.disk_mib } : {}),
    },
    ...(body.volumes?.length ? { volumeMounts: body.volumes.map((v) => ({ name: v.name, path: v.path, readOnly: v.read_only })) } : {}),
  };
}

export function sandboxCreate(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op, signal, log }) => {
    const body = readRequest("sandbox.create", op.request);
    const tenantId = op.tenantId as TenantId;
    const chosen = parseTarget(op.targetId).sandboxId;
    let id = chosen;
    // A re-run (claimer died, or a retry after `unavailable`) finds what the last attempt left.
    // Another tenant's row under the chosen id is the warm member reserved at admission
    // (the create adopts it), or one whose reservation lapsed (then a new id, cold).
    const prev = await svc.repo.getById(id as SandboxId);
    if (!(prev && prev.tenantId !== tenantId && (await svc.isReservedWarm(tenantId, prev.id)))) {
      if (prev && prev.tenantId === tenantId && (prev.state === "running" || prev.state === "paused")) return toSandbox(prev);
      if (prev?.tenantId === tenantId && prev.state === "creating") {
        log.warn({ sandboxId: id }, "re-running an interrupted create: releasing the half-made sandbox");
        await svc.abandonCreate(prev, "create interrupted (controller restart); re-created", signal);
      }
      if (prev) id = "";
    }
    // A re-created sandbox (after an interrupted attempt) gets a new id; the target follows it.
    const input: CreateInput = { ...toCreateInput(body), ...(id ? { id: id as SandboxId } : {}) };
    try {
      const rec = await svc.create(tenantId, input, signal);
      if (rec.id !== chosen) {
        await retargetOperation(deps.db, op.id, sandboxTarget(rec.id));
      }
      return toSandbox(rec);
    } catch (e: unknown) {
      throw SpaceError.from(e);
    }
  };
}
