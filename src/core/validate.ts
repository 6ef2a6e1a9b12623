/**
 * Validation at every boundary (HTTP bodies, query strings, path params, node-api, files):
 * one function, so every refusal reads the same — `invalid <where>: <field>: <what was
 * wrong> (got <value>)` — and carries the taxonomy code `invalid_argument`.
 */
import type { z } from "zod";
import { SpaceError } from "./errors.ts";

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = value;
  for (const k of path) v = v && typeof v === "object" ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

/** Zod issues → one SpaceError naming each offending field, what was wrong and the value given. */
export function fromZod(e: z.ZodError, where: string, value?: unknown): SpaceError {
  const parts = e.issues.map((i) => {
    const path = i.path.length ? i.path.map(String).join(".") : where;
    const got = i.path.length && value !== undefined ? valueAt(value, i.path) : undefined;
    const shown = got === undefined ? "" : ` (got ${JSON.stringify(got)?.slice(0, 100)})`;
    return `${path}: ${i.message}${shown}`;
  });
  const field = e.issues[0]?.path.length ? e.issues[0].path.map(String).join(".") : where;
  return new SpaceError("invalid_argument", `invalid ${where}: ${parts.join("; ")}`, { details: { field, issues: e.issues } });
}

/** Validates one input against its schema; a missing input is `{}` (a JSON `null` is not missing: it is refused). */
export function parseInput<T extends z.ZodType>(schema: T, value: unknown, where: string): z.output<T> {
  const r = schema.safeParse(value === undefined ? {} : value);
  if (!r.success) throw fromZod(r.error, where, value);
  return r.data;
}
