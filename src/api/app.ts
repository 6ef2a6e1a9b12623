/**
 * The API process's HTTP app: ECW (E2B-compatible), Native (/v1), Admin (/admin/api/v1),
 * health, readiness and metrics. Built from deps without a port so tests can `inject`.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from "fastify";
import { Counter, type Registry } from "prom-client";
import type { Logger } from "../core/log.ts";
import { metricsAllowed } from "../core/metrics.ts";
import { installRequestSpans } from "../core/tracing.ts";
import { ping, type Db } from "../store/db.ts";
import { installErrorHandler } from "./error-body.ts";
import { installStorableInputGuard } from "./storable-input.ts";

export interface ApiAppDeps {
  db: Db;
  log: Logger;
  metrics: Registry;
  /** Registers the surfaces (ECW, Native, Admin) once they are built. */
  surfaces: ReadonlyArray<(app: FastifyInstance) => void | Promise<void>>;
  /** Extra readiness checks (e.g. at least one node ready); a thrown error = not ready. */
  readiness?: ReadonlyArray<() => Promise<void>>;
  /** SPACE_METRICS_TOKEN: `/metrics` then needs `Authorization: Bearer <it>`; empty = open. */
  metricsToken?: string;
  /** SPACE_CAPACITY_RETRY_AFTER_S: `Retry-After` of a 429 for a full cluster. */
  capacityRetryAfterS?: number;
}

export { metricsAllowed };

export const METRICS_REFUSED = { code: 401, message: "/metrics needs Authorization: Bearer <SPACE_METRICS_TOKEN>", reason: "unauthenticated" };

export async function createApiApp(deps: ApiAppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    // Request lines are left to metrics; refusals and failures are logged by the error handler.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 16 * 1024 * 1024,
    // The SDK sends JSON bodies chunked, without Content-Length; Fastify handles that.
    return503OnClosing: true,
  });
  installErrorHandler(app, deps.capacityRetryAfterS);
  installStorableInputGuard(app);
  installRequestSpans(app, "api");
  // An empty JSON body (e.g. POST /v1/sandboxes/:id/pause with Content-Type json and no body)
  // is no body: validation reads it as `{}` where a body is optional.
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_req, body, done) => {
    const text = typeof body === "string" ? body : body.toString("utf8");
    if (text.trim() === "") return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(Object.assign(new Error(`request body is not valid JSON: ${text.slice(0, 80)}`), { statusCode: 400 }), undefined);
    }
  });

  const requests = new Counter({
    name: "space_api_requests_total",
    help: "API requests by route and status",
    labelNames: ["method", "route", "status"],
    registers: [deps.metrics],
  });
  app.addHook("onResponse", async (req, reply) => {
    requests.inc({ method: req.method, route: req.routeOptions.url ?? "unmatched", status: String(reply.statusCode) });
  });

  app.get("/health", async () => ({ status: "ok" }));
  app.get("/ready", async (_req, reply) => {
    try {
      await ping(deps.db);
      for (const check of deps.readiness ?? []) await check();
      return { status: "ready" };
    } catch (e) {
      return reply.status(503).send({ code: 503, message: `not ready: ${(e as Error).message}`, reason: "unavailable" });
    }
  });
  app.get("/metrics", async (req, reply) => {
    if (!metricsAllowed(deps.metricsToken, req.headers.authorization)) return reply.status(401).send(METRICS_REFUSED);
    return reply.type(deps.metrics.contentType).send(await deps.metrics.metrics());
  });

  for (const register of deps.surfaces) await register(app);
  return app;
}
