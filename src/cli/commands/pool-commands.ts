/**
 * `space pool list|info|set|delete`: warm pools (sandboxes kept ready per template) over
 * the Admin API `/admin/api/v1/warm-pools`; the controller's reconciler fills them.
 */
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import { contextOf } from "../client/context.ts";
import { printFields, printJson, printLine, printTable } from "../client/output.ts";

interface Pool {
  template: string;
  size: number;
  max_size: number;
  vcpu: number;
  memory_mib: number;
  disk_mib: number;
  idle_policy: string;
  status: unknown;
  members?: Array<{ id: string; state: string; sandbox_id: string | null; node_id: string | null; ready_at: string | null }>;
}

const IDLE_POLICIES = ["running", "suspended", "suspend_when_memory_short"];

const whole = (flag: string, min: number) => (v: string) => {
  if (!/^\d+$/.test(v) || Number(v) < min) throw new SpaceError("invalid_argument", `${flag} takes a whole number of at least ${min} (got ${JSON.stringify(v)})`);
  return Number(v);
};

export function registerPoolCommands(program: Command): void {
  const pool = program
    .command("pool")
    .description("warm pools: sandboxes kept ready per template, adopted by creates — Admin API")
    .addHelpText("after", "\nExamples:\n  $ space pool set base --size 3\n  $ space pool set base --size 3 --max-size 50   # grows for a burst\n  $ space pool info base\n  $ space pool set base --size 0   # drain it\n  $ space pool delete base");

  pool
    .command("list")
    .alias("ls")
    .description("list warm pools")
    .action(async (_o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { pools } = await ctx.client.admin<{ pools: Pool[] }>("GET", "/warm-pools");
      if (ctx.out.json) return printJson(pools);
      printTable(
        ["TEMPLATE", "SIZE", "MAX SIZE", "VCPU", "MEMORY", "IDLE POLICY", "STATUS"],
        pools.map((p) => [p.template, p.size, p.max_size, p.vcpu, `${p.memory_mib} MiB`, p.idle_policy, typeof p.status === "string" ? p.status : JSON.stringify(p.status)]),
        "no warm pools (space pool set <template> --size N makes one)",
      );
    });

  pool
    .command("info <template>")
    .alias("get")
    .description("show a pool and its members")
    .action(async (template: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const p = await ctx.client.admin<Pool>("GET", `/warm-pools/${encodeURIComponent(template)}`);
      if (ctx.out.json) return printJson(p);
      const { members = [], ...rest } = p;
      printFields(rest);
      printTable(
        ["MEMBER", "STATE", "SANDBOX", "NODE", "READY AT"],
        members.map((m) => [m.id, m.state, m.sandbox_id, m.node_id, m.ready_at]),
        "no members yet",
      );
    });

  pool
    .command("set <template>")
    .description("create or resize a template's pool")
    .requiredOption("--size <n>", "sandboxes to keep ready (0 empties it)", whole("--size", 0))
    .option("--max-size <n>", "grow for a burst up to this many: to the creates of the last SPACE_WARM_POOL_DEMAND_WINDOW_S (default: never beyond --size)", whole("--max-size", 0))
    .option("--vcpu <n>", "vCPUs per member", whole("--vcpu", 1))
    .option("--memory-mib <n>", "memory per member (MiB)", whole("--memory-mib", 64))
    .option("--disk-mib <n>", "disk per member (MiB)", whole("--disk-mib", 64))
    .option("--tenant <id>", "only this tenant's creates adopt members")
    .option("--idle-policy <policy>", IDLE_POLICIES.join(" | "))
    .action(async (template: string, o: { size: number; maxSize?: number; vcpu?: number; memoryMib?: number; diskMib?: number; tenant?: string; idlePolicy?: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      if (o.idlePolicy !== undefined && !IDLE_POLICIES.includes(o.idlePolicy)) throw new SpaceError("invalid_argument", `--idle-policy takes ${IDLE_POLICIES.join(", ")} (got ${JSON.stringify(o.idlePolicy)})`);
      const p = await ctx.client.admin<Pool>("PUT", `/warm-pools/${encodeURIComponent(template)}`, {
        size: o.size,
        ...(o.maxSize !== undefined ? { max_size: o.maxSize } : {}),
        ...(o.vcpu !== undefined ? { vcpu: o.vcpu } : {}),
        ...(o.memoryMib !== undefined ? { memory_mib: o.memoryMib } : {}),
        ...(o.diskMib !== undefined ? { disk_mib: o.diskMib } : {}),
        ...(o.tenant ? { tenant_id: o.tenant } : {}),
        ...(o.idlePolicy ? { idle_policy: o.idlePolicy } : {}),
      });
      if (ctx.out.json) return printJson(p);
      printLine(`pool ${p.template}: size ${p.size}${p.max_size > p.size ? `, grows to ${p.max_size}` : ""}`);
    });

  pool
    .command("delete <template>")
    .alias("rm")
    .description("delete a pool (its idle members are killed)")
    .action(async (template: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      await ctx.client.admin("DELETE", `/warm-pools/${encodeURIComponent(template)}`);
      if (ctx.out.json) return printJson({ deleted: template });
      printLine(`deleted pool ${template}`);
    });
}
