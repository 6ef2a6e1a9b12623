/**
 * A sandbox's logs on the node → control plane wire: `GET /v1/sandboxes/:id/logs` answers
 * from the node's retained copy of envd's entries (contract/envd-logs.ts), selected by
 * `selectLogs`.
 */
import { z } from "zod";
import { LOGS_PAGE_MAX, LogLevel, SandboxLogEntry } from "./envd-logs.ts";

const LEVEL_RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** What the control plane asks the node for (E2B's v1 `start` is a forward cursor). */
export interface LogQuery {
  /** Milliseconds since the epoch: forward from it (inclusive), or backward from it (inclusive; default now). */
  cursorMs?: number;
  direction: "forward" | "backward";
  /** Minimum level. */
  level?: LogLevel;
  /** Case-sensitive substring of the message. */
  search?: string;
  limit: number;
}

export const LogQuerySchema = z
  .object({
    cursor: z.coerce.number().int().nonnegative().optional(),
    direction: z.enum(["forward", "backward"]).default("forward"),
    level: z.optional(LogLevel),
    search: z.string().max(1024).optional(),
    limit: z.coerce.number().int().min(0).max(LOGS_PAGE_MAX).default(LOGS_PAGE_MAX),
  })
  .strict();

export const SandboxLogs = z.object({ logs: z.array(SandboxLogEntry) });

/** The query as node-api's query string. */
export function logQueryString(q: LogQuery): string {
  const p = new URLSearchParams({ direction: q.direction, limit: String(q.limit) });
  if (q.cursorMs !== undefined) p.set("cursor", String(q.cursorMs));
  if (q.level) p.set("level", q.level);
  if (q.search !== undefined) p.set("search", q.search);
  return p.toString();
}

/** `entries` oldest first → the query's page: forward oldest first, backward newest first. */
export function selectLogs(entries: readonly SandboxLogEntry[], q: LogQuery): SandboxLogEntry[] {
  const min = q.level ? LEVEL_RANK[q.level] : 0;
  const keep = (e: SandboxLogEntry, t: number) =>
    LEVEL_RANK[e.level] >= min &&
    (q.search === undefined || e.message.includes(q.search)) &&
    (q.cursorMs === undefined || (q.direction === "forward" ? t >= q.cursorMs : t <= q.cursorMs));
  const out: SandboxLogEntry[] = [];
  if (q.limit === 0) return out;
  const n = entries.length;
  for (let i = 0; i < n; i++) {
    const e = entries[q.direction === "forward" ? i : n - 1 - i]!;
    if (!keep(e, Date.parse(e.timestamp))) continue;
    out.push(e);
    if (out.length >= q.limit) break;
  }
  return out;
}
