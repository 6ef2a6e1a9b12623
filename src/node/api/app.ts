/**
 * node-api: the HTTP API the control plane (and the gateway) calls on a node. Every route
 * of src/contract/node-api.ts; bodies validated with its schemas; errors
 * `{ code, message }` with the status of core/errors `httpStatus`; `Authorization: Bearer
 * <internal token>` (or, on the proxy, `X-Space-Node-Token`, so a user's own
 * Authorization header passes through).
 */
import { timingSafeEqual } from "node:crypto";
import type { Registry } from "prom-client";
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { z } from "zod";
import { httpStatus, SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { SandboxManager } from "../sandboxes/manager.ts";
import { MetricsRangeQuery, NODE_TOKEN_HEADER, SandboxEgress, SandboxInit, SandboxSpec, type NodeHealth, type NodeInventory, type SandboxStatus } from "../../contract/node-api.ts";
import { LogQuerySchema } from "../../contract/sandbox-logs.ts";
import { proxyToSandbox } from "./proxy.ts";
import type { NodeSnapshots } from "../snapshots/node-snapshots.ts";
import { registerSnapshotRoutes } from "../snapshots/snapshot-routes.ts";
import { registerVolumeRoutes, type VolumeRouteDeps } from "./volume-routes.ts";
import { parseInput as parse } from "../../core/validate.ts";
import { installRequestSpans } from "../../core/tracing.ts";
import { metricsAllowed } from "../../core/metrics.ts";

export interface NodeApiDeps {
  /** The internal token (read per request: the agent resolves it at start). */
  token: () => string;
  /** undefined until the agent has started (routes answer 503 meanwhile). */
  manager: () => SandboxManager | undefined;
  /** Memory checkpoints (node/snapshots); undefined where the runtime cannot checkpoint. */
  snapshots?: () => NodeSnapshots | undefined;
  /** A create restored from its template's capture after ready (node/templates/capture.ts); undefined = boot cold. */
  restoreCaptured?: (spec: SandboxSpec, signal: AbortSignal) => Promise<SandboxStatus | undefined>;
  /** Volumes on this node (their routes answer 409 where the node has none). */
  volumes?: VolumeRouteDeps;
  inventory: () => Promise<NodeInventory>;
  health: () => Promise<NodeHealth>;
  logger: Logger;
  /** The process registry `GET /metrics` serves; absent = no /metrics route. */
  metrics?: Registry;
  /** SPACE_METRICS_TOKEN: `/metrics` then needs `Authorization: Bearer <it>` (not the internal token); empty = open. */
  metricsToken?: string;
}

const Params = z.object({ id: z.string().regex(/^[a-z0-9]{20}$/, "a sandbox id") });
const ProxyParams = Params.extend({ port: z.coerce.number().int().min(1).max(65535) });

function tokenMatches(given: string | undefined, want: string): boolean {
  if (!given) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(want);
  return a.length === b.length && timingSafeEqual(a, b);
}

export function createNodeApi(deps: NodeApiDeps): FastifyInstance {
  // Request lines at debug: at info they were most of a node's log (the control plane polls it).
  const app = Fastify({ loggerInstance: deps.logger as FastifyBaseLogger, bodyLimit: 16 * 1024 * 1024, logController: new LogController({ disableRequestLogging: true }) }) as unknown as FastifyInstance;
  app.addHook("onResponse", (req, reply, done) => {
    req.log.debug({ method: req.method, url: req.url, statusCode: reply.statusCode, ms: Math.round(reply.elapsedTime) }, "node-api request");
    done();
  });
  installRequestSpans(app, "node", { onlyContinued: true });

  const mgr = (): SandboxManager => {
    const m = deps.manager();
    if (!m) throw new SpaceError("unavailable", "node agent is starting");
    return m;
  };
  const signalOf = (req: FastifyRequest): AbortSignal => {
    const ac = new AbortController();
    req.raw.once("close", () => {
      if (!req.raw.complete) ac.abort();
    });
    return AbortSignal.any([ac.signal, AbortSignal.timeout(10 * 60_000)]);
  };

  app.setErrorHandler((err: unknown, _req, reply) => {
    const e = (err as { validation?: unknown; statusCode?: number }).statusCode === 400 && !(err instanceof SpaceError)
      ? new SpaceError("invalid_argument", (err as Error).message)
      : SpaceError.from(err);
    if (e.code === "internal") deps.logger.error({ err }, "node-api internal error");
    void reply.status(httpStatus[e.code]).send({ code: e.code, message: e.message });
  });
  app.setNotFoundHandler((req, reply) => {
    void reply.status(404).send({ code: "not_found", message: `no route ${req.method} ${req.url}` });
  });

  app.addHook("onRequest", async (req, reply) => {
    if (req.url === "/health" && req.method === "GET") return;
    if (req.url === "/metrics" && req.method === "GET" && deps.metrics) {
      if (!metricsAllowed(deps.metricsToken, req.headers.authorization))
        return reply.status(401).send({ code: "unauthenticated", message: "/metrics needs Authorization: Bearer <SPACE_METRICS_TOKEN>" });
      return;
    }
    const auth = req.headers.authorization;
    const bearer = auth?.startsWith("Bearer ") ? auth.slice(7) : undefined;
    const alt = req.headers[NODE_TOKEN_HEADER];
    const want = deps.token();
    const ok = want !== "" && (tokenMatches(bearer, want) || tokenMatches(typeof alt === "string" ? alt : undefined, want));
    if (!ok) return reply.status(401).send({ code: "unauthenticated", message: "missing or wrong internal token" });
  });

  app.get("/health", async () => deps.health());
  const registry = deps.metrics;
  if (registry) app.get("/metrics", async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()));
  app.get("/v1/inventory", async () => deps.inventory());

  app.post("/v1/sandboxes", async (req, reply) => {
    const spec = parse(SandboxSpec, req.body, "sandbox spec");
    const st = (await deps.restoreCaptured?.(spec, signalOf(req))) ?? (await mgr().create(spec, signalOf(req)));
    return reply.status(201).send(st);
  });
  app.get("/v1/sandboxes", async () => ({ sandboxes: mgr().list() }));
  app.get("/v1/sandboxes/:id", async (req) => mgr().get(parse(Params, req.params, "path").id));
  for (const verb of ["pause", "resume", "stop", "start"] as const) {
    app.post(`/v1/sandboxes/:id/${verb}`, async (req) => {
      const { id } = parse(Params, req.params, "path");
      return mgr()[verb](id, signalOf(req));
    });
  }
  app.post("/v1/sandboxes/:id/init", async (req) => {
    const { id } = parse(Params, req.params, "path");
    return mgr().init(id, parse(SandboxInit, req.body ?? {}, "init"));
  });
  app.post("/v1/sandboxes/:id/egress", async (req) => {
    const { id } = parse(Params, req.params, "path");
    const body = parse(SandboxEgress, req.body ?? {}, "egress");
    await mgr().setEgress(id, body.allowInternetAccess, signalOf(req), body.policy);
    return mgr().get(id);
  });
  app.delete("/v1/sandboxes/:id", async (req, reply) => {
    const { id } = parse(Params, req.params, "path");
    await mgr().kill(id, signalOf(req));
    return reply.status(204).send();
  });
  app.get("/v1/sandboxes/:id/network", async (req) => {
    const { id } = parse(Params, req.params, "path");
    return mgr().networkRecord(id, signalOf(req));
  });
  app.get("/v1/sandboxes/:id/metrics", async (req) => {
    const { id } = parse(Params, req.params, "path");
    return mgr().metrics(id, signalOf(req));
  });
  // History and logs answer for a sandbox that left the node too (kept for a while), [] for one never here.
  app.get("/v1/sandboxes/:id/metrics/history", async (req) => {
    const { id } = parse(Params, req.params, "path");
    const q = parse(MetricsRangeQuery, req.query ?? {}, "metrics range");
    return { samples: await mgr().metricsHistory(id, q) };
  });
  app.get("/v1/sandboxes/:id/logs", async (req) => {
    const { id } = parse(Params, req.params, "path");
    const q = parse(LogQuerySchema, req.query ?? {}, "logs query");
    const { cursor, ...rest } = q;
    return { logs: await mgr().logs(id, { ...rest, ...(cursor !== undefined ? { cursorMs: cursor } : {}) }) };
  });

  registerSnapshotRoutes(app, deps.snapshots ?? (() => undefined), signalOf);
  if (deps.volumes) registerVolumeRoutes(app, deps.volumes, signalOf);

  // The proxy lives in its own scope whose body parser leaves the body unread, so it can
  // be streamed as is.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    const handler = async (req: FastifyRequest, reply: FastifyReply) => {
      const { id, port } = parse(ProxyParams, req.params, "path");
      const m = mgr();
      m.target(id, port); // refuse before hijacking: unknown or not running → a typed error
      const prefix = `/v1/sandboxes/${id}/proxy/${port}`;
      const rest = req.raw.url!.slice(req.raw.url!.indexOf(prefix) + prefix.length) || "/";
      reply.hijack();
      const viaAlt = typeof req.headers[NODE_TOKEN_HEADER] === "string";
      proxyToSandbox(m, id, port, rest.startsWith("/") ? rest : `/${rest}`, req.raw, reply.raw, !viaAlt);
    };
    scope.all("/v1/sandboxes/:id/proxy/:port", handler);
    scope.all("/v1/sandboxes/:id/proxy/:port/*", handler);
  });

  return app;
}
