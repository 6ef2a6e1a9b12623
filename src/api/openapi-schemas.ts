/**
 * zod schemas as OpenAPI 3.1 schemas (zod v4 `toJSONSchema`, draft 2020-12 = OpenAPI
 * 3.1's dialect), shared by the Native and Admin documents: schemas with a `meta({id})`
 * become `#/components/schemas/<id>` refs, and every conversion's `$defs` are collected
 * for the document's components.
 */
import { z } from "zod";

export type Json = Record<string, unknown>;

export class OpenApiSchemas {
  /** Named schemas ($defs of every conversion, hoisted into components). */
  readonly hoisted: Record<string, Json> = {};

  /** A zod schema as JSON Schema; a root that is itself a named schema is inlined. */
  schema(s: z.ZodType, io: "input" | "output" = "output"): Json {
    const raw = JSON.stringify(z.toJSONSchema(s, { target: "draft-2020-12", io, unrepresentable: "any" })).replaceAll('"#/$defs/', '"#/components/schemas/');
    const out = JSON.parse(raw) as Json;
    delete out.$schema;
    const defs = (out.$defs ?? {}) as Record<string, Json>;
    delete out.$defs;
    Object.assign(this.hoisted, defs);
    const ref = typeof out.$ref === "string" ? out.$ref.replace("#/components/schemas/", "") : undefined;
    return ref && defs[ref] && Object.keys(out).length === 1 ? defs[ref]! : out;
  }
}
