/**
 * node-api wire of the template-manager (added to node-api.ts's routes):
 *
 *   POST   /v1/builds                      NodeBuildRequest → 202 NodeBuildStatus (starts; idempotent by buildId)
 *   GET    /v1/builds/:buildId?logsOffset  → NodeBuildStatus (log entries from the offset)
 *   DELETE /v1/builds/:buildId             → 204 (cancels)
 *   PUT    /v1/templates/:alias            { name } → TemplateInfo (point a node template at a built one)
 *   DELETE /v1/templates/:name             → 204 (absent = ok; also from the blob store catalog)
 *   POST   /v1/templates/:name/pull        → TemplateInfo (present, or pulled from the catalog)
 *   GET    /v1/template-cache              → { totalMib, groups } (what LRU eviction sees)
 */
import { z } from "zod";
import { BuildRecipe } from "./build-recipe.ts";

export const NodeTemplateName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, "a node template name");

export const NodeBuildRequest = z.object({ buildId: z.string().min(1).max(100), name: NodeTemplateName, recipe: BuildRecipe }).strict();
export type NodeBuildRequest = z.input<typeof NodeBuildRequest>;

export const BuildLogEntry = z.object({
  timestamp: z.string(),
  level: z.enum(["debug", "info", "warn", "error"]),
  message: z.string(),
  /** `base`, the 1-based step index, or `finalize` (E2B's step names). */
  step: z.string().optional(),
});
export type BuildLogEntry = z.infer<typeof BuildLogEntry>;

export const NodeBuildStatusSchema = z.object({
  buildId: z.string(),
  name: z.string(),
  status: z.enum(["building", "ready", "failed"]),
  logEntries: z.array(BuildLogEntry),
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
      /** The registry manifest a registry-image build was pinned to. */
      imageDigest: z.string().optional(),
      /** Bytes of image blobs that pull fetched (0 when the node had every layer). */
      pulledBytes: z.number().int().nonnegative().optional(),
    })
    .optional(),
  error: z.object({ message: z.string(), step: z.string().optional() }).optional(),
});
export type NodeBuildStatusWire = z.infer<typeof NodeBuildStatusSchema>;
