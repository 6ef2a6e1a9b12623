/**
 * node-api routes of the template-manager (wire: src/contract/node-builds.ts), registered
 * beside the sandbox routes, behind the same internal-token hook and error handler.
 *
 * Creates and restores (POST /v1/sandboxes, POST /v1/restores) first make sure their
 * template is on this node (pulled on demand), pinned against eviction until answered.
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { SpaceError } from "../../core/errors.ts";
import type { TemplateBuilder } from "./builder.ts";
import type { TemplateCache } from "./template-cache.ts";
import { NodeBuildRequest, NodeTemplateName as NAME } from "../../contract/node-builds.ts";
import { parseInput as parse } from "../../core/validate.ts";

export function registerTemplateRoutes(app: FastifyInstance, builder: () => TemplateBuilder | undefined, templates: () => TemplateCache | undefined): void {
  const b = (): TemplateBuilder => {
    const x = builder();
    if (!x) throw new SpaceError("unavailable", "this node cannot build templates (no btrfs node cache) or is starting");
    return x;
  };
  const c = (): TemplateCache => {
    const x = templates();
    if (!x) throw new SpaceError("unavailable", "this node has no template cache (no btrfs node cache) or is starting");
    return x;
  };
  const pins = new WeakMap<object, () => void>();
  app.addHook("preHandler", async (req) => {
    if (req.method !== "POST" || (req.url !== "/v1/sandboxes" && req.url !== "/v1/restores")) return;
    const cache = templates();
    const parsed = UsesTemplate.safeParse(req.body);
    if (!cache || !parsed.success) return; // the route's own validation answers
    const name = "template" in parsed.data ? parsed.data.template : parsed.data.spec.template;
    try {
      const { release } = await cache.acquire(name, AbortSignal.timeout(30 * 60_000));
      pins.set(req, release);
    } catch (e) {
      // A restore brings its own disk; its template is only needed for a later suspend.
      if (req.url === "/v1/sandboxes") throw e;
    }
  });
  app.addHook("onResponse", async (req) => {
    pins.get(req)?.();
    pins.delete(req);
  });
  app.post("/v1/builds", async (req, reply) => {
    const body = parse(NodeBuildRequest, req.body, "build request");
    const recipe = await b().pin(body.buildId, body.recipe, AbortSignal.timeout(60_000));
    return reply.status(202).send(b().start(body.buildId, body.name, recipe));
  });
  app.get("/v1/builds/:buildId", async (req) => {
    const { buildId } = parse(z.object({ buildId: z.string() }), req.params, "path");
    const { logsOffset } = parse(z.object({ logsOffset: z.coerce.number().int().min(0).default(0) }), req.query ?? {}, "query");
    return b().status(buildId, logsOffset);
  });
  app.delete("/v1/builds/:buildId", async (req, reply) => {
    const { buildId } = parse(z.object({ buildId: z.string() }), req.params, "path");
    b().cancel(buildId);
    return reply.status(204).send();
  });
  app.put("/v1/templates/:alias", async (req) => {
    const { alias } = parse(z.object({ alias: NAME }), req.params, "path");
    const { name } = parse(z.object({ name: NAME }), req.body, "body");
    return c().point(alias, name, AbortSignal.timeout(120_000));
  });
  app.delete("/v1/templates/:name", async (req, reply) => {
    const { name } = parse(z.object({ name: NAME }), req.params, "path");
    await c().remove(name, AbortSignal.timeout(120_000), { catalog: true });
    return reply.status(204).send();
  });
  app.post("/v1/templates/:name/pull", async (req) => {
    const { name } = parse(z.object({ name: NAME }), req.params, "path");
    return c().ensure(name, AbortSignal.timeout(30 * 60_000));
  });
  app.get("/v1/template-cache", async () => c().usage());
}

/** The template a create or restore body names (either shape; anything else is the route's to refuse). */
const UsesTemplate = z.union([z.object({ template: NAME }), z.object({ spec: z.object({ template: NAME }) })]);
