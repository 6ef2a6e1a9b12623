import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { SandboxLogEntry } from "./envd-logs.ts";
import { selectLogs, type LogQuery } from "./sandbox-logs.ts";

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
const entries: SandboxLogEntry[] = [
  { timestamp: at(1), level: "debug", message: "request", fields: {} },
  { timestamp: at(2), level: "info", message: "process started", fields: {} },
  { timestamp: at(3), level: "warn", message: "process ended", fields: {} },
  { timestamp: at(4), level: "error", message: "uncaught exception", fields: {} },
  { timestamp: at(5), level: "info", message: "init", fields: {} },
];
const ms = (s: number) => Date.parse(at(s));

describe("selectLogs", () => {
  const cases: Array<[string, LogQuery, string[]]> = [
    ["forward, all", { direction: "forward", limit: 10 }, ["request", "process started", "process ended", "uncaught exception", "init"]],
    ["forward from a cursor (inclusive), limited", { direction: "forward", limit: 2, cursorMs: ms(2) }, ["process started", "process ended"]],
    ["backward: newest first", { direction: "backward", limit: 2 }, ["init", "uncaught exception"]],
    ["backward from a cursor (inclusive)", { direction: "backward", limit: 10, cursorMs: ms(2) }, ["process started", "request"]],
    ["minimum level info", { direction: "forward", limit: 10, level: "info" }, ["process started", "process ended", "uncaught exception", "init"]],
    ["minimum level warn", { direction: "forward", limit: 10, level: "warn" }, ["process ended", "uncaught exception"]],
    ["search is a case-sensitive substring", { direction: "forward", limit: 10, search: "process" }, ["process started", "process ended"]],
    ["search matching nothing", { direction: "forward", limit: 10, search: "Process" }, []],
    ["limit 0", { direction: "forward", limit: 0 }, []],
  ];
  for (const [name, q, want] of cases) {
    it(name, () => assert.deepEqual(selectLogs(entries, q).map((e) => e.message), want));
  }
});
