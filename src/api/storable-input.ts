/**
 * Every string a request carries (body, query, path) must be storable text: Postgres
 * refuses NUL in text and jsonb, and unpaired surrogates in jsonb, and would answer a
 * 500 with its own message. One hook on the whole app refuses them first, 400 naming the
 * field, so no surface (ECW, Native, Admin) and no new route can forget it.
 */
import type { FastifyInstance } from "fastify";
import { invalid } from "../core/errors.ts";
import { unstorable } from "../core/limits.ts";

/**
 * Deeper than any body SPACE takes; a walk (this one, a schema's) past it would overflow
 * the stack on a hostile body (20 000 nested arrays were a 500).
 */
const MAX_DEPTH = 64;

/** The first string (or object key) in `value` that cannot be stored, as `<path>: <why>`. */
export function findUnstorable(value: unknown, path: string[] = []): string | undefined {
  if (path.length >= MAX_DEPTH && isJsonContainer(value)) return `${path.slice(0, 3).join(".")}…: nested deeper than ${MAX_DEPTH} levels`;
  if (typeof value === "string") {
    const why = unstorable(value);
    return why === undefined ? undefined : `${path.join(".") || "value"}: ${why}`;
  }
  // A raw upload (a Buffer, a stream) is not text.
  if (!isJsonContainer(value)) return undefined;
  for (const [k, v] of Object.entries(value)) {
    const keyWhy = Array.isArray(value) ? undefined : unstorable(k);
    if (keyWhy !== undefined) return `${path.join(".") || "value"}: key ${JSON.stringify(k).slice(0, 80)} ${keyWhy}`;
    const found = findUnstorable(v, [...path, k]);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** Objects of parsed text (JSON, query strings, path params: whatever their prototype), not bytes or streams. */
function isJsonContainer(v: unknown): v is Record<string, unknown> | unknown[] {
  if (typeof v !== "object" || v === null) return false;
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) return false;
  return typeof (v as { pipe?: unknown }).pipe !== "function";
}

export function installStorableInputGuard(app: FastifyInstance): void {
  app.addHook("preValidation", async (req) => {
    for (const [where, value] of [["path", req.params], ["query", req.query], ["body", req.body]] as const) {
      const found = findUnstorable(value);
      if (found !== undefined) throw invalid(`invalid ${where}: ${found}`, { field: found.split(":")[0] });
    }
  });
}
