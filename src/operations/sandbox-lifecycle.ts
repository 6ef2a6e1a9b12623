/**
 * The sandbox lifecycle operations (`sandbox.pause`, `resume`, `stop`, `start`, `suspend`,
 * `restore`, `fork`): each reads the sandbox, decides whether the step applies (a
 * re-claimed operation that already did it answers the sandbox), and calls the service's
 * verb (src/sandboxes/service.ts).
 */
import { SpaceError, notFound } from "../core/errors.ts";
import type { TenantId } from "../core/ids.ts";
import { toSandbox } from "./results.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";
import { readRequest } from "./operation-kind.ts";

export function sandboxPause(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op, signal }) => {
    const { sandbox_id: id } = readRequest("sandbox.pause", op.request);
    const rec = await svc.get(op.tenantId as TenantId, id);
    if (rec.state === "paused") {
      if (op.claimCount > 1) return toSandbox(rec); // this operation paused it before its claimer died
      throw new SpaceError("failed_precondition", `sandbox ${id} is already paused`);
    }
    if (rec.state !== "running" || !rec.nodeId) throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a running sandbox can be paused`);
    return toSandbox(await svc.pauseResident({ ...rec, nodeId: rec.nodeId }, signal));
  };
}

export function sandboxResume(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op }) => {
    const { sandbox_id: id } = readRequest("sandbox.resume", op.request);
    const tenantId = op.tenantId as TenantId;
    const rec = await svc.get(tenantId, id);
    if (rec.state === "running" && op.claimCount > 1) return toSandbox(rec);
    if (rec.state !== "paused") throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a paused sandbox can be resumed`);
    // The service's connect resumes a resident-paused sandbox on its node.
    const { sandbox } = await svc.connect(tenantId, id, undefined);
    const fresh = await svc.repo.get(tenantId, sandbox.id);
    if (!fresh) throw notFound(`sandbox ${id} not found`);
    return toSandbox(fresh);
  };
}

/**
 * `sandbox.stop`: processes end, the rootfs is kept, the node's network slot is freed.
 * running → stopping → (node stop) → stopped; a node failure leaves it `failed`.
 */
export function sandboxStop(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op, signal }) => {
    const { sandbox_id: id } = readRequest("sandbox.stop", op.request);
    const rec = await svc.get(op.tenantId as TenantId, id);
    if (rec.state === "stopped" && op.claimCount > 1) return toSandbox(rec);
    if (rec.state !== "running" && !(rec.state === "stopping" && op.claimCount > 1)) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a running sandbox can be stopped`);
    }
    if (!rec.nodeId) throw new SpaceError("internal", `running sandbox ${id} has no node`);
    return toSandbox(await svc.stop({ ...rec, nodeId: rec.nodeId }, signal));
  };
}

/**
 * `sandbox.start`: boots a stopped sandbox again from its kept rootfs on its node.
 * stopped → resuming → running (new address; the end time is at least 5 min away);
 * a failed boot goes back to stopped.
 */
export function sandboxStart(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op, signal }) => {
    const { sandbox_id: id } = readRequest("sandbox.start", op.request);
    const rec = await svc.get(op.tenantId as TenantId, id);
    if (rec.state === "running" && op.claimCount > 1) return toSandbox(rec);
    if (rec.state !== "stopped" && !(rec.state === "resuming" && op.claimCount > 1)) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a stopped sandbox can be started`);
    }
    if (!rec.nodeId) throw new SpaceError("internal", `stopped sandbox ${id} has no node`);
    return toSandbox(await svc.start({ ...rec, nodeId: rec.nodeId }, signal));
  };
}

/**
 * `sandbox.suspend`: the service's suspend (ECW pause): memory checkpoint + disk
 * snapshot (`memory: false`: the disk only), node freed. A re-claimed operation that already suspended it answers it.
 */
export function sandboxSuspend(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op }) => {
    const { sandbox_id: id, memory } = readRequest("sandbox.suspend", op.request);
    const tenantId = op.tenantId as TenantId;
    const rec = await svc.get(tenantId, id);
    if (rec.state === "suspended" && op.claimCount > 1) return toSandbox(rec);
    return toSandbox(await svc.suspend(tenantId, id, { kind: memory === false ? "disk" : "full" }));
  };
}

/** `sandbox.restore`: the service's connect of a suspended sandbox (one restore however many callers). */
export function sandboxRestore(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op }) => {
    const { sandbox_id: id } = readRequest("sandbox.restore", op.request);
    const tenantId = op.tenantId as TenantId;
    const rec = await svc.get(tenantId, id);
    if (rec.state === "running" && op.claimCount > 1) return toSandbox(rec);
    if (!["suspended", "resuming", "suspending"].includes(rec.state)) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a suspended sandbox can be restored`);
    }
    const { sandbox } = await svc.connect(tenantId, id, undefined);
    const fresh = await svc.repo.get(tenantId, sandbox.id);
    if (!fresh) throw notFound(`sandbox ${id} not found`);
    return toSandbox(fresh);
  };
}

/** `sandbox.fork`: one new sandbox from a capture of a running one; the result is the new sandbox. */
export function sandboxFork(deps: HandlerDeps): OperationHandler {
  const svc = deps.sandboxes;
  return async ({ op }) => {
    const r = readRequest("sandbox.fork", op.request);
    const [outcome] = await svc.fork(op.tenantId as TenantId, r.sandbox_id, {
      count: 1,
      ...(r.timeout_s !== undefined ? { timeoutSec: r.timeout_s } : {}),
      ...(r.metadata ? { metadata: r.metadata } : {}),
    });
    if (!outcome?.sandbox) throw outcome?.error ?? new SpaceError("internal", "fork produced no sandbox");
    return toSandbox(outcome.sandbox);
  };
}
