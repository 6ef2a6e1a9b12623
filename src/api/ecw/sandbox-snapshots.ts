/**
 * fork: one live checkpoint of a running sandbox, then `count` new sandboxes from it;
 * 201 with one `{sandbox}` or `{error}` per requested fork.
 *
 * Named snapshots (e2b-wire.md §2): `POST /sandboxes/{id}/snapshots {name?}` → 201
 * `{snapshotID, names}` (a live checkpoint made durable; the source keeps running; 404
 * unknown sandbox); `GET /snapshots?sandboxID&name&limit&nextToken` → `[SnapshotInfo]`
 * + `X-Next-Token`. The SDK deletes one with `DELETE /templates/{snapshotID}` (ecw-templates.ts)
 * and starts a sandbox from one with `templateID` = its id or name (the service's create).
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { Snapshot } from "../../sandboxes/snapshot-repo.ts";
import { toErrorBody } from "../error-body.ts";
import { apiKeyOf, parse, tenantOf } from "./ecw-edge.ts";
import { toSandbox } from "./ecw-present.ts";
import { ForkBody, IdParams, SnapshotBody } from "./ecw-schemas.ts";
import type { EcwDeps } from "./ecw-routes.ts";

export function registerSandboxSnapshots(app: FastifyInstance, deps: EcwDeps) {
  app.post("/sandboxes/:sandboxID/fork", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const body = parse(ForkBody, req.body ?? {}, "fork body");
    await deps.limiter?.admit(tenantOf(req), apiKeyOf(req));
    const outcomes = await deps.sandboxes.fork(tenantOf(req), sandboxID, {
      ...(body.count !== undefined ? { count: body.count } : {}),
      ...(body.timeout !== undefined ? { timeoutSec: body.timeout } : {}),
    });
    return reply.code(201).send(
      outcomes.map((o) => (o.sandbox ? { sandbox: toSandbox(o.sandbox, { domain: deps.sandboxDomain }) } : { error: toErrorBody(o.error!) })),
    );
  });

  app.post("/sandboxes/:sandboxID/snapshots", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const body = parse(SnapshotBody, req.body ?? {}, "snapshot body");
    const snap = await deps.sandboxes.createNamedSnapshot(tenantOf(req), sandboxID, body.name);
    return reply.code(201).send(toSnapshotInfo(snap));
  });

  app.get("/snapshots", async (req, reply) => {
    const q = parse(SnapshotListQuery, req.query ?? {}, "query");
    const page = await deps.sandboxes.listNamedSnapshots(tenantOf(req), {
      limit: q.limit ?? 100,
      ...(q.sandboxID ? { sandboxId: q.sandboxID } : {}),
      ...(q.name ? { name: q.name } : {}),
      ...(q.nextToken ? { nextToken: q.nextToken } : {}),
    });
    if (page.nextToken) void reply.header("X-Next-Token", page.nextToken);
    return page.items.map(toSnapshotInfo);
  });
}

const SnapshotListQuery = z.looseObject({
  sandboxID: z.string().min(1).max(128).optional(),
  name: z.string().min(1).max(128).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  nextToken: z.string().regex(/^sn_[a-z0-9]{16}$/, "a token from X-Next-Token").optional(),
});

/** E2B SnapshotInfo, plus its durability (`local`: only on its node, no blob store there; `durable`: in the blob store). */
export function toSnapshotInfo(s: Snapshot): { snapshotID: string; names: string[]; durability: "local" | "durable" } {
  return { snapshotID: s.id, names: s.name ? [s.name] : [], durability: s.state === "durable" ? "durable" : "local" };
}
