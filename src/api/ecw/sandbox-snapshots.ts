/**
 * fork and snapshots wait on the snapshot issue: a clear 501 for a sandbox the caller
 * owns (404 otherwise), never a fake success. Listing answers the truth: none exist.
 */
import type { FastifyInstance } from "fastify";
import { unimplemented } from "../../core/errors.ts";
import { parse, tenantOf } from "./http.ts";
import { ForkBody, IdParams, SnapshotBody } from "./schemas.ts";
import type { EcwDeps } from "./routes.ts";

export function registerSandboxSnapshots(app: FastifyInstance, deps: EcwDeps) {
  app.post("/sandboxes/:sandboxID/fork", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    parse(ForkBody, req.body, "fork body");
    await deps.sandboxes.get(tenantOf(req), sandboxID);
    throw unimplemented(`fork is not available yet: sandbox ${sandboxID} was not forked (memory checkpoints land with the snapshot issue)`);
  });

  app.post("/sandboxes/:sandboxID/snapshots", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    parse(SnapshotBody, req.body, "snapshot body");
    await deps.sandboxes.get(tenantOf(req), sandboxID);
    throw unimplemented(`snapshots are not available yet: no snapshot of sandbox ${sandboxID} was taken`);
  });

  app.get("/snapshots", async () => []);
}
