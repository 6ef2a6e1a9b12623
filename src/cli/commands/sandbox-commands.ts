/**
 * `space sandbox list|info|create|kill|pause|resume|fork|snapshot|timeout|metrics|logs`:
 * the sandbox lifecycle over ECW (the E2B REST API, the same calls the e2b SDK makes).
 * exec, shell and cp talk to envd and live in sandbox-io.ts.
 */
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import { contextOf } from "../client/context.ts";
import { printFields, printJson, printLine, printTable, withSpinner } from "../client/output.ts";
import { registerSandboxIo } from "./sandbox-io.ts";

interface ListedSandbox {
  sandboxID: string;
  templateID: string;
  alias?: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  startedAt: string;
  endAt: string;
  state: string;
  metadata: Record<string, string>;
}

interface SandboxMetric {
  timestamp: string;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}

interface LogEntry {
  timestamp: string;
  level: string;
  message: string;
  fields: Record<string, string>;
}

interface CreateFlags {
  timeout?: number;
  metadata?: Record<string, string>;
  env?: Record<string, string>;
  onTimeout?: string;
  internet: boolean;
  vcpu?: number;
  memoryMib?: number;
  diskMib?: number;
}

/** `k=v` pairs of a repeatable option into a record. */
function pairs(flag: string) {
  return (value: string, prev: Record<string, string> = {}): Record<string, string> => {
    const i = value.indexOf("=");
    if (i <= 0) throw new SpaceError("invalid_argument", `${flag} takes KEY=VALUE (got ${JSON.stringify(value)})`);
    return { ...prev, [value.slice(0, i)]: value.slice(i + 1) };
  };
}

export function positiveInt(flag: string) {
  return (value: string): number => {
    if (!/^\d+$/.test(value) || Number(value) < 1) throw new SpaceError("invalid_argument", `${flag} takes a whole number of at least 1 (got ${JSON.stringify(value)})`);
    return Number(value);
  };
}

const MIB = 1024 * 1024;
const mib = (bytes: number) => `${Math.round(bytes / MIB)} MiB`;

export function registerSandboxCommands(program: Command): void {
  const sandbox = program
    .command("sandbox")
    .alias("sbx")
    .description("sandboxes: list, inspect, create, kill, pause, resume, fork, snapshot, exec, shell, cp, logs")
    .addHelpText(
      "after",
      `
Examples:
  $ space sandbox create base --timeout 600 --metadata owner=me
  $ space sandbox list --state running
  $ space sandbox exec <id> -- ls -la /home/user
  $ space sandbox shell <id>
  $ space sandbox cp ./data.csv <id>:/home/user/data.csv
  $ space sandbox logs <id> -f`,
    );

  sandbox
    .command("list")
    .alias("ls")
    .description("list sandboxes (running and paused by default)")
    .option("--state <states>", "comma-separated: running, paused")
    .option("--metadata <k=v>", "only sandboxes with this metadata (repeatable)", pairs("--metadata"))
    .option("--limit <n>", "at most this many", positiveInt("--limit"))
    .action(async (o: { state?: string; metadata?: Record<string, string>; limit?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const metadata = o.metadata ? new URLSearchParams(o.metadata).toString() : undefined;
      const list = await ctx.client.ecw<ListedSandbox[]>("GET", "/v2/sandboxes", undefined, { query: { state: o.state, metadata, limit: o.limit } });
      if (ctx.out.json) return printJson(list);
      printTable(
        ["ID", "TEMPLATE", "STATE", "VCPU", "MEMORY", "STARTED", "ENDS"],
        list.map((s) => [s.sandboxID, s.alias ?? s.templateID, s.state, s.cpuCount, `${s.memoryMB} MiB`, s.startedAt, s.endAt]),
        "no sandboxes (space sandbox create starts one)",
      );
    });

  sandbox
    .command("info <id>")
    .alias("get")
    .description("show one sandbox")
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const info = await ctx.client.ecw<Record<string, unknown>>("GET", `/sandboxes/${encodeURIComponent(id)}`);
      if (ctx.out.json) return printJson(info);
      const { envdAccessToken: _token, ...shown } = info;
      printFields(shown);
    });

  sandbox
    .command("create [template]")
    .description("create a sandbox from a template (default: base); prints its id")
    .option("--timeout <seconds>", "seconds until it is killed (or paused, with --on-timeout pause)", positiveInt("--timeout"))
    .option("--metadata <k=v>", "metadata (repeatable)", pairs("--metadata"))
    .option("--env <k=v>", "environment variable of its processes (repeatable)", pairs("--env"))
    .option("--on-timeout <action>", "kill or pause")
    .option("--vcpu <n>", "vCPUs", positiveInt("--vcpu"))
    .option("--memory-mib <n>", "memory in MiB", positiveInt("--memory-mib"))
    .option("--disk-mib <n>", "disk in MiB", positiveInt("--disk-mib"))
    .option("--no-internet", "deny all outbound traffic")
    .addHelpText("after", "\nExamples:\n  $ id=$(space sandbox create base --timeout 3600)\n  $ space sandbox create my-env --env DEBUG=1 --json")
    .action(
      async (template: string | undefined, o: CreateFlags, cmd: Command) => {
        const ctx = contextOf(cmd);
        const resources = {
          ...(o.vcpu !== undefined ? { vcpu: o.vcpu } : {}),
          ...(o.memoryMib !== undefined ? { memory_mib: o.memoryMib } : {}),
          ...(o.diskMib !== undefined ? { disk_mib: o.diskMib } : {}),
        };
        const metadata = { ...o.metadata, ...(Object.keys(resources).length ? { "space.resources": JSON.stringify(resources) } : {}) };
        if (o.onTimeout !== undefined && o.onTimeout !== "kill" && o.onTimeout !== "pause") throw new SpaceError("invalid_argument", `--on-timeout takes kill or pause (got ${JSON.stringify(o.onTimeout)})`);
        const body = {
          templateID: template ?? "base",
          ...(o.timeout !== undefined ? { timeout: o.timeout } : {}),
          ...(Object.keys(metadata).length ? { metadata } : {}),
          ...(o.env ? { envVars: o.env } : {}),
          ...(o.onTimeout === "pause" ? { autoPause: true } : {}),
          ...(o.internet === false ? { allow_internet_access: false } : {}),
        };
        const created = await withSpinner(ctx.out, `creating a sandbox from ${body.templateID}`, () => ctx.client.ecw<{ sandboxID: string }>("POST", "/v2/sandboxes", body));
        if (ctx.out.json) return printJson(created);
        printLine(created.sandboxID);
      },
    );

  sandbox
    .command("kill <ids...>")
    .alias("rm")
    .description("kill sandboxes (their disks and snapshots go too)")
    .action(async (ids: string[], _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      for (const id of ids) await ctx.client.ecw("DELETE", `/sandboxes/${encodeURIComponent(id)}`);
      if (ctx.out.json) return printJson({ killed: ids });
      for (const id of ids) printLine(`killed ${id}`);
    });

  sandbox
    .command("pause <id>")
    .description("pause a sandbox: memory and disk to a snapshot; `resume` brings it back")
    .action(async (id: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      await withSpinner(ctx.out, `pausing ${id}`, () => ctx.client.ecw("POST", `/sandboxes/${encodeURIComponent(id)}/pause`, {}));
      if (ctx.out.json) return printJson({ sandboxID: id, state: "paused" });
      printLine(`paused ${id}`);
    });

  sandbox
    .command("resume <id>")
    .description("resume a paused sandbox (a running one only gets --timeout)")
    .option("--timeout <seconds>", "seconds it then runs until its timeout", positiveInt("--timeout"))
    .action(async (id: string, o: { timeout?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const r = await withSpinner(ctx.out, `resuming ${id}`, () =>
        ctx.client.ecw<Record<string, unknown>>("POST", `/sandboxes/${encodeURIComponent(id)}/connect`, o.timeout !== undefined ? { timeout: o.timeout } : {}),
      );
      if (ctx.out.json) return printJson(r);
      printLine(`resumed ${id}`);
    });

  sandbox
    .command("fork <id>")
    .description("fork a running sandbox: copies with its memory and disk; prints their ids")
    .option("--count <n>", "how many copies", positiveInt("--count"))
    .option("--timeout <seconds>", "timeout of each copy", positiveInt("--timeout"))
    .action(async (id: string, o: { count?: number; timeout?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const r = await withSpinner(ctx.out, `forking ${id}`, () =>
        ctx.client.ecw<Array<{ sandbox?: { sandboxID: string }; error?: { message: string } }>>("POST", `/sandboxes/${encodeURIComponent(id)}/fork`, {
          ...(o.count !== undefined ? { count: o.count } : {}),
          ...(o.timeout !== undefined ? { timeout: o.timeout } : {}),
        }),
      );
      if (ctx.out.json) return printJson(r);
      for (const f of r) printLine(f.sandbox ? f.sandbox.sandboxID : `failed: ${f.error?.message ?? "unknown error"}`);
      if (r.some((f) => !f.sandbox)) throw new SpaceError("failed_precondition", `${r.filter((f) => !f.sandbox).length} of ${r.length} forks failed`);
    });

  sandbox
    .command("snapshot <id>")
    .description("take a named snapshot of a running sandbox (create new sandboxes from its id)")
    .option("--name <name>", "snapshot name")
    .action(async (id: string, o: { name?: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const r = await withSpinner(ctx.out, `snapshotting ${id}`, () =>
        ctx.client.ecw<{ snapshotID: string; names: string[] }>("POST", `/sandboxes/${encodeURIComponent(id)}/snapshots`, o.name ? { name: o.name } : {}),
      );
      if (ctx.out.json) return printJson(r);
      printLine(r.snapshotID);
    });

  sandbox
    .command("timeout <id> <seconds>")
    .description("set the time left until the sandbox's timeout")
    .action(async (id: string, seconds: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const timeout = positiveInt("<seconds>")(seconds);
      await ctx.client.ecw("POST", `/sandboxes/${encodeURIComponent(id)}/timeout`, { timeout });
      if (ctx.out.json) return printJson({ sandboxID: id, timeout });
      printLine(`${id} now ends in ${timeout} s`);
    });

  sandbox
    .command("metrics <id>")
    .description("CPU, memory and disk samples of a sandbox")
    .option("--since <seconds>", "samples of the last this many seconds", positiveInt("--since"))
    .action(async (id: string, o: { since?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const start = o.since !== undefined ? Math.floor(Date.now() / 1000) - o.since : undefined;
      const samples = await ctx.client.ecw<SandboxMetric[]>("GET", `/sandboxes/${encodeURIComponent(id)}/metrics`, undefined, { query: { start } });
      if (ctx.out.json) return printJson(samples);
      printTable(
        ["TIME", "VCPU", "CPU %", "MEMORY", "DISK"],
        samples.map((m) => [m.timestamp, m.cpuCount, m.cpuUsedPct.toFixed(1), `${mib(m.memUsed)} / ${mib(m.memTotal)}`, `${mib(m.diskUsed)} / ${mib(m.diskTotal)}`]),
        "no samples yet (the node collects one every SPACE_METRICS_INTERVAL_MS)",
      );
    });

  sandbox
    .command("logs <id>")
    .description("envd's log lines of a sandbox; -f keeps following")
    .option("-f, --follow", "keep printing new lines until Ctrl-C")
    .option("--level <level>", "at least this level: debug, info, warn, error")
    .option("--search <text>", "only lines containing text")
    .option("--limit <n>", "at most this many lines per page", positiveInt("--limit"))
    .addHelpText("after", "\nWith --json each line is one JSON object (newline-delimited).")
    .action(async (id: string, o: { follow?: boolean; level?: string; search?: string; limit?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      let cursor: number | undefined;
      const print = (e: LogEntry) => {
        if (ctx.out.json) process.stdout.write(`${JSON.stringify(e)}\n`);
        else {
          const extra = Object.entries(e.fields)
            .map(([k, v]) => `${k}=${v}`)
            .join(" ");
          printLine(`${e.timestamp} ${e.level.toUpperCase().padEnd(5)} ${e.message}${extra ? ` ${extra}` : ""}`);
        }
      };
      let stop = false;
      process.once("SIGINT", () => {
        stop = true;
      });
      for (;;) {
        const { logs } = await ctx.client.ecw<{ logs: LogEntry[] }>("GET", `/v2/sandboxes/${encodeURIComponent(id)}/logs`, undefined, {
          query: { direction: "forward", cursor, level: o.level, search: o.search, limit: o.limit },
        });
        for (const e of logs) print(e);
        const last = logs.at(-1);
        if (last) cursor = Date.parse(last.timestamp) + 1;
        if (!o.follow || stop) return;
        if (logs.length === 0) await new Promise((r) => setTimeout(r, 1000));
        if (stop) return;
      }
    });

  registerSandboxIo(sandbox);
}
