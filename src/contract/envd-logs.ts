/**
 * A sandbox's logs as envd keeps them and the node reads them (`GET ENVD_LOGS_PATH?after=`,
 * SPACE's own route: envd's ring of its structured log lines, paged by sequence number).
 * Entries have E2B's `SandboxLogEntry` shape (timestamp, level, message, fields of strings),
 * so the node and the control plane pass them through (contract/sandbox-logs.ts).
 *
 * envd gives every entry a timestamp strictly later than the one before (a millisecond
 * on when two fall in the same one): E2B's v2 cursor is a timestamp, and strictly
 * increasing timestamps let a client page with `cursor = last + 1` without losing or
 * repeating an entry.
 *
 * Written with `zod/mini`, like every contract envd imports: envd is in every sandbox's
 * memory, and the full `zod` made two thirds of its bundle and ~4 MB of each envd's heap.
 */
import * as z from "zod/mini";

export const ENVD_LOGS_PATH = "/space/logs";

export const LogLevel = z.enum(["debug", "info", "warn", "error"]);
export type LogLevel = z.infer<typeof LogLevel>;

/** Longest message and field value kept (the node refuses nothing, it truncates). */
export const LOG_TEXT_MAX = 4096;

/** Most entries one page (envd or node) carries. */
export const LOGS_PAGE_MAX = 1000;

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
  boot: z.string().check(z.maxLength(64)),
  /** Sequence number of the newest entry envd has (0 = none yet). */
  head: z.int().check(z.nonnegative()),
  entries: z.array(z.extend(SandboxLogEntry, { seq: z.int().check(z.positive()) })).check(z.maxLength(LOGS_PAGE_MAX)),
});
export type EnvdLogsPage = z.infer<typeof EnvdLogsPage>;
