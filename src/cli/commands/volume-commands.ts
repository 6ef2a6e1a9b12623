/**
 * `space volume create|list|get|delete`: volumes (docs/volumes.md) over the Native API
 * `/v1/volumes`. Create and delete are operations: the command waits for the operation to
 * end (a failed one is the error its failure code names) and shows the volume, with the
 * token of its content API (E2B's `Volume` uses it with no sandbox running).
 */
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import { contextOf, type CommandContext } from "../client/context.ts";
import { printFields, printJson, printLine, printTable, withSpinner } from "../client/output.ts";
import { operationFailure, pollOperation, type Operation } from "./operation-commands.ts";
import { positiveInt } from "./sandbox-commands.ts";

interface Volume {
  id: string;
  name: string;
  size_mib: number;
  node_id: string | null;
  created_at: string;
  token?: string;
  mounted_by?: { sandbox_id: string; read_only: boolean }[];
}

const WAIT_MS = 10 * 60_000;

const get = (ctx: CommandContext, ref: string) => ctx.client.native<Volume>("GET", `/v1/volumes/${encodeURIComponent(ref)}`);

/** Waits for the operation a mutation answered with; its result once it succeeded. */
async function settled(ctx: CommandContext, op: Operation, what: string): Promise<Operation> {
  const end = await withSpinner(ctx.out, what, () => pollOperation(ctx.client, op.id, Date.now() + WAIT_MS));
  if (end.state === "failed") throw operationFailure(end);
  if (end.state !== "succeeded") throw new SpaceError("deadline_exceeded", `operation ${op.id} is still ${end.state}: space operation wait ${op.id}`);
  return end;
}

function show(v: Volume): void {
  const { mounted_by, ...rest } = v;
  printFields({ ...rest, mounted_by: mounted_by?.length ? mounted_by.map((m) => `${m.sandbox_id}${m.read_only ? " (read-only)" : ""}`).join(", ") : "-" });
}

export function registerVolumeCommands(program: Command): void {
  const volume = program
    .command("volume")
    .alias("vol")
    .description("volumes: storage that outlives sandboxes, mounted at create — Native API")
    .addHelpText(
      "after",
      "\nExamples:\n  $ space volume create datasets --size-mib 2048\n  $ space volume list\n  $ space volume get datasets\n  $ space volume delete datasets\n" +
        "Mount one at create: the e2b SDK's volumeMounts ({\"/mnt/data\": \"datasets\"}, \"datasets:ro\" read-only) or Native volumes: [{name, path, read_only}].",
    );

  volume
    .command("create <name>")
    .description("create a volume (1-63 letters, digits, '.', '_' or '-')")
    .option("--size-mib <n>", "its quota in MiB (default: the server's SPACE_VOLUME_DEFAULT_MIB)", positiveInt("--size-mib"))
    .action(async (name: string, o: { sizeMib?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const op = await ctx.client.native<Operation>("POST", "/v1/volumes", { name, ...(o.sizeMib !== undefined ? { size_mib: o.sizeMib } : {}) });
      const end = await settled(ctx, op, `creating volume ${name}`);
      const v = await get(ctx, (end.result as Volume).id);
      if (ctx.out.json) return printJson(v);
      show(v);
    });

  volume
    .command("list")
    .alias("ls")
    .description("list volumes")
    .action(async (_o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { volumes } = await ctx.client.native<{ volumes: Volume[] }>("GET", "/v1/volumes");
      if (ctx.out.json) return printJson(volumes);
      printTable(
        ["ID", "NAME", "SIZE", "NODE", "CREATED"],
        volumes.map((v) => [v.id, v.name, `${v.size_mib} MiB`, v.node_id, v.created_at]),
        "no volumes (space volume create <name> makes one)",
      );
    });

  volume
    .command("get <volume>")
    .alias("info")
    .description("show a volume (an id or a name): its content token and the sandboxes holding it")
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const v = await get(ctx, ref);
      if (ctx.out.json) return printJson(v);
      show(v);
    });

  volume
    .command("delete <volume>")
    .alias("rm")
    .description("delete a volume (an id or a name) and its data; refused while a sandbox holds it")
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { id } = await get(ctx, ref);
      const op = await ctx.client.native<Operation>("DELETE", `/v1/volumes/${encodeURIComponent(id)}`);
      await settled(ctx, op, `deleting volume ${ref}`);
      if (ctx.out.json) return printJson({ id, deleted: true });
      printLine(`deleted volume ${id}`);
    });
}
