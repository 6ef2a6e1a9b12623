/** `GET /sandboxes/{id}`, list v1/v2, metrics (one sandbox's range, the batch's latest), logs v1/v2. */
import type { FastifyInstance } from "fastify";
import { parse, tenantOf } from "./ecw-edge.ts";
import { toListedSandbox, toSandboxDetail, toSandboxLogLine, toSandboxMetric } from "./ecw-present.ts";
import { IdParams, ListQuery, LogsQuery, LogsV2Query, MetricsBatchQuery, MetricsQuery } from "./ecw-schemas.ts";
import { SpaceError } from "../../core/errors.ts";
import { decodeMetadataFilter, decodeStateFilter } from "./list-filters.ts";
import type { EcwDeps } from "./ecw-routes.ts";

export function registerSandboxRead(app: FastifyInstance, deps: EcwDeps) {
  const { sandboxes } = deps;

  app.get("/sandboxes/:sandboxID", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const r = await sandboxes.get(tenantOf(req), sandboxID);
    // A service without the store (the memory repo) has no volumes.
    const mounts = (await sandboxes.volumes?.mountsOf(r.id)) ?? [];
    return toSandboxDetail(r, mounts, { domain: deps.sandboxDomain });
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
      const mounts = (await sandboxes.volumes?.mountsOfMany(page.items.map((r) => r.id))) ?? new Map();
      return page.items.map((r) => toListedSandbox(r, mounts.get(r.id)));
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

  // The latest sample of each listed sandbox that has one; unknown and others' ids are left out.
  app.get("/sandboxes/metrics", async (req) => {
    const q = parse(MetricsBatchQuery, req.query, "metrics query");
    const ids = [...new Set((Array.isArray(q.sandbox_ids) ? q.sandbox_ids : [q.sandbox_ids]).flatMap((s) => s.split(",")).map((s) => s.trim()).filter(Boolean))];
    if (ids.length > 100) throw new SpaceError("invalid_argument", `invalid metrics query: sandbox_ids: at most 100 ids (got ${ids.length})`);
    const since = new Date(Date.now() - 60_000);
    const latest = await Promise.all(
      ids.map(async (id) => {
        const samples = await sandboxes.metrics(tenantOf(req), id, { start: since }).catch((e: unknown) => {
          if (e instanceof SpaceError && e.code === "not_found") return [];
          throw e;
        });
        return [id, samples.at(-1)] as const;
      }),
    );
    return { sandboxes: Object.fromEntries(latest.filter(([, m]) => m).map(([id, m]) => [id, toSandboxMetric(m!)])) };
  });

  // Logs (envd's structured lines, collected on the node: e2b-wire.md §2).
  app.get("/sandboxes/:sandboxID/logs", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const q = parse(LogsQuery, req.query, "logs query");
    const entries = await sandboxes.logs(tenantOf(req), sandboxID, { direction: "forward", limit: q.limit, ...(q.start !== undefined ? { cursorMs: q.start } : {}) });
    return { logs: entries.map(toSandboxLogLine), logEntries: entries };
  });
  app.get("/v2/sandboxes/:sandboxID/logs", async (req) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const q = parse(LogsV2Query, req.query, "logs query");
    const logs = await sandboxes.logs(tenantOf(req), sandboxID, {
      direction: q.direction,
      limit: q.limit,
      ...(q.cursor !== undefined ? { cursorMs: q.cursor } : {}),
      ...(q.level ? { level: q.level } : {}),
      ...(q.search !== undefined ? { search: q.search } : {}),
    });
    return { logs };
  });
}
