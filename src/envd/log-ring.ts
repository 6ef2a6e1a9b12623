/**
 * envd's own structured log lines, kept in a bounded ring the node pulls from
 * (`GET ENVD_LOGS_PATH?after=<seq>`, src/contract/envd-logs.ts): the sandbox's logs as
 * E2B's logs endpoints serve them. The ring lives in envd's memory, so a memory checkpoint
 * (pause, connect, restore on another node) carries it along. Timestamps are strictly
 * increasing (see the contract); field values are strings, truncated like messages.
 */
import { randomUUID } from "node:crypto";
import { LOG_TEXT_MAX, LOGS_PAGE_MAX, type EnvdLogsPage, type LogLevel } from "../contract/envd-logs.ts";

type Entry = EnvdLogsPage["entries"][number];

export const DEFAULT_LOG_ENTRIES = 1000;

const clip = (s: string) => (s.length > LOG_TEXT_MAX ? `${s.slice(0, LOG_TEXT_MAX)}…` : s);

export class EnvdLogRing {
  /** A fresh id per envd start (not per V8 snapshot: built at start). */
  readonly boot = randomUUID();
  readonly #max: number;
  readonly #entries: Entry[] = [];
  #seq = 0;
  #lastMs = 0;

  constructor(maxEntries = DEFAULT_LOG_ENTRIES) {
    this.#max = Math.max(1, maxEntries);
  }

  push(level: LogLevel, message: string, fields: Record<string, unknown> = {}): Entry {
    const now = Math.max(Date.now(), this.#lastMs + 1);
    this.#lastMs = now;
    const f: Record<string, string> = {};
    for (const [k, v] of Object.entries(fields)) {
      if (v === undefined) continue;
      f[k] = clip(typeof v === "string" ? v : JSON.stringify(v));
    }
    const e: Entry = { seq: ++this.#seq, timestamp: new Date(now).toISOString(), level, message: clip(message), fields: f };
    this.#entries.push(e);
    if (this.#entries.length > this.#max) this.#entries.splice(0, this.#entries.length - this.#max);
    return e;
  }

  /** Entries with a sequence number above `after`, oldest first, at most `limit`. */
  page(after: number, limit: number): EnvdLogsPage {
    const first = this.#entries.findIndex((e) => e.seq > after);
    const entries = first < 0 ? [] : this.#entries.slice(first, first + Math.min(Math.max(0, limit), LOGS_PAGE_MAX));
    return { boot: this.boot, head: this.#seq, entries };
  }
}
