/**
 * POST /v1/sandboxes/:id/{pause,resume,suspend,restore,stop,start,fork}, all operations:
 * pause/resume (resident, frozen in memory), stop/start (processes end, rootfs kept),
 * suspend/restore (memory checkpoint + disk snapshot, node freed; `memory: false` keeps
 * the disk only; the same service as ECW pause/connect) and fork (a new sandbox from a live checkpoint).
 */
import type { FastifyInstance } from "fastify";
import { sandboxTarget } from "../../operations/requests.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, submit, tenantWith } from "./native-edge.ts";
import { DEFAULT_CREATE_DEADLINE_MS, exists } from "./sandboxes.ts";
import { EmptyBody, ForkSandboxBody, SandboxIdParams, SuspendSandboxBody } from "./native-schemas.ts";

const queued = ["pause", "resume", "stop", "start", "suspend", "restore"] as const;

export function registerLifecycleRoutes(app: FastifyInstance, deps: NativeDeps): void {
  for (const verb of queued) {
    app.post(`/v1/sandboxes/:id/${verb}`, async (req, reply) => {
      const { tenantId } = await tenantWith(deps, req, "sandboxes:write");
      const { id } = parse(SandboxIdParams, req.params, "path");
      // suspend takes E2B's `memory` option (it travels in the request); the other verbs an empty body.
      const body = verb === "suspend" ? parse(SuspendSandboxBody, req.body ?? {}, "body") : parse(EmptyBody, req.body, "body");
      return submit(deps, req, reply, {
        tenantId,
        kind: `sandbox.${verb}`,
        target: sandboxTarget(id),
        request: { sandbox_id: id, ...body },
        deadlineMs: deps.operationDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS,
        admit: () => exists(deps, tenantId, id),
      });
    });
  }
  app.post("/v1/sandboxes/:id/fork", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "sandboxes:write");
    const { id } = parse(SandboxIdParams, req.params, "path");
    const body = parse(ForkSandboxBody, req.body, "body");
    return submit(deps, req, reply, {
      tenantId,
      kind: "sandbox.fork",
      target: sandboxTarget(id),
      request: { sandbox_id: id, ...(body.metadata ? { metadata: body.metadata } : {}), ...(body.timeout_s ? { timeout_s: body.timeout_s } : {}) },
      deadlineMs: deps.operationDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS,
      admit: () => exists(deps, tenantId, id),
    });
  });
}
