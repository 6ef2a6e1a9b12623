/**
 * Keyset pagination cursor for sandbox lists: the (createdAt, id) of the last item
 * served. Keys are immutable, so pages never skip or repeat while sandboxes come and go.
 */
import { invalid } from "../core/errors.ts";

export interface ListCursor {
  createdAtMs: number;
  id: string;
}

export function encodeCursor(c: ListCursor): string {
  return Buffer.from(`${c.createdAtMs}.${c.id}`).toString("base64url");
}

export function decodeCursor(s: string): ListCursor {
  const raw = Buffer.from(s, "base64url").toString("utf8");
  const m = /^(\d{1,16})\.([a-z0-9]{1,64})$/.exec(raw);
  if (!m) throw invalid(`nextToken '${s.slice(0, 64)}' is not a token this server issued`, { field: "nextToken" });
  return { createdAtMs: Number(m[1]), id: m[2]! };
}

/** Strict "comes after" in the given order. */
export function isAfter(a: ListCursor, cursor: ListCursor, order: "asc" | "desc"): boolean {
  const cmp = a.createdAtMs - cursor.createdAtMs || (a.id < cursor.id ? -1 : a.id > cursor.id ? 1 : 0);
  return order === "asc" ? cmp > 0 : cmp < 0;
}
