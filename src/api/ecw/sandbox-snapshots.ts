/**
 * fork: one live checkpoint of a running sandbox, then `count` new sandboxes from it;
 * 201 with one `{sandbox}` or `{error}` per requested fork. Named snapshots (create,
 * list) are not built yet: a clear 501 for a sandbox the caller owns (404 otherwise),
 * never a fake success; listing answers the truth: none exist.
 */
import type { FastifyInstance } from "fastify";
import { unimplemented } from "../../core/errors.ts";
import { toErrorBody } from "../errors.ts";
import { parse, tenantOf } from "./http.ts";
import { toSandbox } from "./present.ts";
import { ForkBody, IdParams, SnapshotBody } from "./schemas.ts";
import type { EcwDeps } from "./routes.ts";

export function registerSandboxSnapshots(app: FastifyInstance, deps: EcwDeps) {
  app.post("/sandboxes/:sandboxID/fork", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const body = parse(ForkBody, req.body ?? {}, "fork body");
    const outcomes = await deps.sandboxes.fork(tenantOf(req), sandboxID, {
      ...(body.count !== undefined ? { count: body.count } : {}),
      ...(body.timeout !== undefined ? { timeoutSec: body.timeout } : {}),
    });
    return reply.code(201).send(
      outcomes.map((o) => (o.sandbox ? { sandbox: toSandbox(o.sandbox, { domain: deps.sandboxDomain }) } : { error: toErrorBody(o.error!) })),
    );
  });

  app.post("/sandboxes/:sandboxID/snapshots", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    parse(SnapshotBody, req.body ?? {}, "snapshot body");
    await deps.sandboxes.get(tenantOf(req), sandboxID);
    throw unimplemented(`named snapshots are not available yet: no snapshot of sandbox ${sandboxID} was taken (use pause/connect or fork)`);
  });

  app.get("/snapshots", async () => []);
}
