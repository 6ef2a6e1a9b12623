/** `GET /sandboxes/{id}`, list v1/v2, metrics, logs v1/v2. */
import type { FastifyInstance } from "fastify";
import { parse, tenantOf } from "./ecw-edge.ts";
import { toListedSandbox, toSandboxDetail, toSandboxMetric } from "./ecw-present.ts";
import { IdParams, ListQuery, MetricsQuery } from "./ecw-schemas.ts";
import { decodeMetadataFilter, decodeStateFilter } from "./list-filters.ts";
import type { EcwDeps } from "./ecw-routes.ts";

export function registerSandboxRead(app: FastifyInstance, deps: EcwDeps) {
  const { sandboxes } = deps;

  app.get("/sandboxes/:sandboxID", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    return toSandboxDetail(await sandboxes.get(tenantOf(req), sandboxID), { domain: deps.sandboxDomain });
  });

  for (const path of ["/sandboxes", "/v2/sandboxes"]) {
    app.get(path, async (req, reply) => {
      const q = parse(ListQuery, req.query, "list query");
      const page = await sandboxes.list(tenantOf(req), {
        states: decodeStateFilter(q.state),
        metadata: decodeMetadataFilter(q.metadata),
        ...(q.template ? { templateId: q.template } : {}),
        ...(q.startedAfter ? { startedAfter: new Date(q.startedAfter) } : {}),
        order: q.order,
        limit: q.limit,
        ...(q.nextToken ? { cursor: q.nextToken } : {}),
      });
      if (page.cursor) reply.header("x-next-token", page.cursor);
      return page.items.map(toListedSandbox);
    });
  }

  app.get("/sandboxes/:sandboxID/metrics", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const q = parse(MetricsQuery, req.query, "metrics query");
    const samples = await sandboxes.metrics(tenantOf(req), sandboxID, {
      ...(q.start !== undefined ? { start: new Date(q.start * 1000) } : {}),
      ...(q.end !== undefined ? { end: new Date(q.end * 1000) } : {}),
    });
    return samples.map(toSandboxMetric);
  });

  // Sandbox logs are not collected yet: the right shape, empty.
  app.get("/sandboxes/:sandboxID/logs", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    await sandboxes.get(tenantOf(req), sandboxID);
    return { logs: [], logEntries: [] };
  });
  app.get("/v2/sandboxes/:sandboxID/logs", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    await sandboxes.get(tenantOf(req), sandboxID);
    return { logs: [] };
  });
}
