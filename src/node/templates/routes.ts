/**
 * node-api routes of the template-manager (registered beside contract.ts's routes, behind
 * the same internal-token hook and error handler):
 *
 *   POST   /v1/builds                      NodeBuildRequest → 202 NodeBuildStatus (starts; idempotent by buildId)
 *   GET    /v1/builds/:buildId?logsOffset  → NodeBuildStatus (log entries from the offset)
 *   DELETE /v1/builds/:buildId             → 204 (cancels)
 *   PUT    /v1/templates/:alias            { name } → TemplateInfo (point a node template at a built one)
 *   DELETE /v1/templates/:name             → 204 (absent = ok)
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { SpaceError } from "../../core/errors.ts";
import type { TemplateBuilder } from "./builder.ts";
import { BuildRecipe } from "./recipe.ts";
import { parseInput as parse } from "../../core/validate.ts";

const NAME = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, "a node template name");

export const NodeBuildRequest = z.object({ buildId: z.string().min(1).max(100), name: NAME, recipe: BuildRecipe }).strict();
export type NodeBuildRequest = z.input<typeof NodeBuildRequest>;

export const NodeBuildStatusSchema = z.object({
  buildId: z.string(),
  name: z.string(),
  status: z.enum(["building", "ready", "failed"]),
  logEntries: z.array(z.object({ timestamp: z.string(), level: z.enum(["debug", "info", "warn", "error"]), message: z.string(), step: z.string().optional() })),
  logsTotal: z.number(),
  result: z
    .object({
      name: z.string(),
      rootfsSizeMib: z.number(),
      digest: z.string(),
      environment: z.string(),
      cachedSteps: z.number(),
      builtSteps: z.number(),
      durationMs: z.number(),
      config: z.object({ env: z.record(z.string(), z.string()), workdir: z.string(), user: z.string() }),
    })
    .optional(),
  error: z.object({ message: z.string(), step: z.string().optional() }).optional(),
});
export type NodeBuildStatusWire = z.infer<typeof NodeBuildStatusSchema>;


export function registerTemplateRoutes(app: FastifyInstance, builder: () => TemplateBuilder | undefined): void {
  const b = (): TemplateBuilder => {
    const x = builder();
    if (!x) throw new SpaceError("unavailable", "this node cannot build templates (no btrfs node cache) or is starting");
    return x;
  };
  app.post("/v1/builds", async (req, reply) => {
    const body = parse(NodeBuildRequest, req.body, "build request");
    return reply.status(202).send(b().start(body.buildId, body.name, body.recipe));
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
    return b().pointTemplate(alias, name, AbortSignal.timeout(120_000));
  });
  app.delete("/v1/templates/:name", async (req, reply) => {
    const { name } = parse(z.object({ name: NAME }), req.params, "path");
    await b().deleteTemplate(name, AbortSignal.timeout(120_000));
    return reply.status(204).send();
  });
}
