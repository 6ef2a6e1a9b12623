/**
 * POST /v1/sandboxes/:id/{pause,resume,suspend,restore,stop,start,fork}.
 * pause/resume (resident, frozen in memory) and stop/start (processes end, rootfs kept)
 * are operations. The others need node or
 * snapshot support this build does not have yet: they answer 501 before anything is
 * queued, naming what is missing — never a fake success.
 */
import type { FastifyInstance } from "fastify";
import { SpaceError } from "../../core/errors.ts";
import { sandboxTarget } from "../../controller/operations/requests.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, submit, tenantWith } from "./http.ts";
import { DEFAULT_CREATE_DEADLINE_MS, exists } from "./sandboxes.ts";
import { EmptyBody, ForkSandboxBody, SandboxIdParams } from "./schemas.ts";

const queued = ["pause", "resume", "stop", "start"] as const;

/** Why each verb is refused for now (shown to the caller). */
export const unsupportedVerbs: Record<string, string> = {
  suspend: "suspend (memory checkpoint + disk snapshot to storage) is not available yet: it lands with the snapshot work; use pause for a resident freeze",
  restore: "restore is not available yet: no sandbox can be suspended by this build",
  fork: "fork is not available yet: it needs memory checkpoints (snapshot work)",
};

export function registerLifecycleRoutes(app: FastifyInstance, deps: NativeDeps): void {
  for (const verb of queued) {
    app.post(`/v1/sandboxes/:id/${verb}`, async (req, reply) => {
      const { tenantId } = await tenantWith(deps, req, "sandboxes:write");
      const { id } = parse(SandboxIdParams, req.params, "path");
      parse(EmptyBody, req.body, "body");
      return submit(deps, req, reply, {
        tenantId,
        kind: `sandbox.${verb}`,
        target: sandboxTarget(id),
        request: { sandbox_id: id },
        deadlineMs: deps.operationDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS,
        admit: () => exists(deps, tenantId, id),
      });
    });
  }
  for (const [verb, why] of Object.entries(unsupportedVerbs)) {
    app.post(`/v1/sandboxes/:id/${verb}`, async (req) => {
      const { tenantId } = await tenantWith(deps, req, "sandboxes:write");
      const { id } = parse(SandboxIdParams, req.params, "path");
      parse(verb === "fork" ? ForkSandboxBody : EmptyBody, req.body, "body");
      await exists(deps, tenantId, id);
      throw new SpaceError("unimplemented", `sandbox ${id}: ${why}`);
    });
  }
}
