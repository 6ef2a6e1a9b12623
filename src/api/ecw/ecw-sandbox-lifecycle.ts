/** kill, timeout, refreshes, pause (= suspend), connect/resume (v1, v2, legacy /resume). */
import type { FastifyInstance } from "fastify";
import { parse, tenantOf } from "./ecw-edge.ts";
import { notFound } from "../../core/errors.ts";
import type { TenantId } from "../../core/ids.ts";
import { toEcwState, toSandbox } from "./ecw-present.ts";
import { ConnectBody, IdParams, PauseBody, RefreshBody, TimeoutBody } from "./ecw-schemas.ts";
import type { EcwDeps } from "./ecw-routes.ts";

export function registerSandboxLifecycle(app: FastifyInstance, deps: EcwDeps) {
  const { sandboxes } = deps;

  app.delete("/sandboxes/:sandboxID", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    await sandboxes.kill(tenantOf(req), sandboxID);
    return reply.code(204).send();
  });

  // Like E2B, timeout and refreshes know running sandboxes only: a paused one is 404
  // (SDK 2.0-2.5 connect() sets the timeout first and resumes when that fails).
  const running = async (tenant: TenantId, id: string) => {
    const rec = await sandboxes.get(tenant, id);
    if (toEcwState(rec.state) === "paused") throw notFound(`sandbox ${id} is paused; connect to resume it`);
  };

  app.post("/sandboxes/:sandboxID/timeout", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const body = parse(TimeoutBody, req.body, "timeout body");
    await running(tenantOf(req), sandboxID);
    await sandboxes.setTimeout(tenantOf(req), sandboxID, body.timeout);
    return reply.code(204).send();
  });

  app.post("/sandboxes/:sandboxID/refreshes", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const body = parse(RefreshBody, req.body, "refresh body");
    await running(tenantOf(req), sandboxID);
    await sandboxes.refresh(tenantOf(req), sandboxID, body.duration ?? 60);
    return reply.code(204).send();
  });

  // E2B pause = suspend (memory checkpoint + disk snapshot, node freed): 204; 409 when already paused.
  // `memory: false` (SDK `keepMemory: false`): the disk only; connect boots the sandbox fresh from it.
  app.post("/sandboxes/:sandboxID/pause", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const body = parse(PauseBody, req.body ?? {}, "pause body");
    await sandboxes.suspend(tenantOf(req), sandboxID, { kind: body.memory === false ? "disk" : "full" });
    return reply.code(204).send();
  });

  for (const path of ["/sandboxes/:sandboxID/connect", "/v2/sandboxes/:sandboxID/connect", "/sandboxes/:sandboxID/resume"]) {
    app.post(path, async (req, reply) => {
      const { sandboxID } = parse(IdParams, req.params, "path");
      const body = parse(ConnectBody, req.body, "connect body");
      // `memory: false` (SDK `onResume: "reboot"`): a paused sandbox boots fresh from its disk.
      const r = await sandboxes.connect(tenantOf(req), sandboxID, body.timeout, { memory: body.memory });
      return reply.code(r.resumed ? 201 : 200).send(toSandbox(r.sandbox, { domain: deps.sandboxDomain }));
    });
  }
}
