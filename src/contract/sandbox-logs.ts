/**
 * A sandbox's logs on both wires they cross: envd → node (`GET ENVD_LOGS_PATH?after=`,
 * SPACE's own route: envd's ring of its structured log lines, paged by sequence number)
 * and node → control plane (`GET /v1/sandboxes/:id/logs`, the node's retained copy,
 * selected by `selectLogs`). Entries have E2B's `SandboxLogEntry` shape (timestamp,
 * level, message, fields of strings), so the control plane passes them through.
 *
 * envd gives every entry a timestamp strictly later than the one before (a millisecond
 * on when two fall in the same one): E2B's v2 cursor is a timestamp, and strictly
 * increasing timestamps let a client page with `cursor = last + 1` without losing or
 * repeating an entry.
 */
import { z } from "zod";

export const ENVD_LOGS_PATH = "/space/logs";

export const LogLevel = z.enum(["debug", "info", "warn", "error"]);
export type LogLevel = z.infer<typeof LogLevel>;

const LEVEL_RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Longest message and field value kept (the node refuses nothing, it truncates). */
export const LOG_TEXT_MAX = 4096;

export const SandboxLogEntry = z.object({
  timestamp: z.string(),
  level: LogLevel,
  message: z.string(),
  fields: z.record(z.string(), z.string()),
});
export type SandboxLogEntry = z.infer<typeof SandboxLogEntry>;

/** One page of envd's ring: entries after the asked sequence number, oldest first. */
export const EnvdLogsPage = z.object({
  /** Random per envd start: a new one means a fresh ring (the node restarts its cursor). */
  boot: z.string().max(64),
  /** Sequence number of the newest entry envd has (0 = none yet). */
  head: z.number().int().nonnegative(),
  entries: z.array(SandboxLogEntry.extend({ seq: z.number().int().positive() })).max(1000),
});
export type EnvdLogsPage = z.infer<typeof EnvdLogsPage>;

/** Most entries one page (envd or node) carries. */
export const LOGS_PAGE_MAX = 1000;

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
    level: LogLevel.optional(),
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
