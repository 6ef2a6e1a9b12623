/**
 * The `space` command. Each subcommand parses its config once, builds its dependencies
 * and runs until SIGINT/SIGTERM, then shuts down cleanly.
 */
import { Command } from "commander";
import { ConfigError, describeConfig, loadConfig, type Config, type VarName } from "../core/config.ts";
import { SpaceError } from "../core/errors.ts";
import { VERSION } from "../core/version.ts";
import type { NodeAdminAction } from "./node-admin.ts";

type Overrides = Partial<Record<VarName, string>>;

function configFrom(overrides: Overrides): Config {
  return loadConfig(process.env, overrides);
}

/** Runs a long-lived command: stops on the first SIGINT/SIGTERM, forces exit on the second. */
async function runUntilSignal(start: () => Promise<() => Promise<void>>): Promise<void> {
  const stop = await start();
  await new Promise<void>((resolve) => {
    let stopping = false;
    const onSignal = (sig: NodeJS.Signals) => {
      if (stopping) {
        process.stderr.write(`\n${sig} again: exiting now\n`);
        process.exit(130);
      }
      stopping = true;
      process.stderr.write(`\n${sig}: stopping…\n`);
      stop().then(resolve, (e: unknown) => {
        process.stderr.write(`error while stopping: ${String(e)}\n`);
        resolve();
      });
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}

export async function main(argv: string[]): Promise<void> {
  const program = new Command("space").description("SPACE: isolated, stateful sandboxes for AI agents").version(VERSION);
  program.exitOverride();

  program
    .command("up")
    .description("run api + controller + one node on this machine (embedded database and blob store)")
    .option("--data-dir <dir>", "data directory (SPACE_DATA_DIR)")
    .option("--port <port>", "API port (SPACE_API_PORT)")
    .option("--gateway-port <port>", "gateway port (SPACE_GATEWAY_PORT)")
    .option("--node-port <port>", "node-api port (SPACE_NODE_PORT)")
    .option("--runtime <runtime>", "runc|crun|process (SPACE_RUNTIME)")
    .action(async (o: { dataDir?: string; port?: string; gatewayPort?: string; nodePort?: string; runtime?: string }) => {
      const config = configFrom({
        ...(o.dataDir && { SPACE_DATA_DIR: o.dataDir }),
        ...(o.port && { SPACE_API_PORT: o.port }),
        ...(o.gatewayPort && { SPACE_GATEWAY_PORT: o.gatewayPort }),
        ...(o.nodePort && { SPACE_NODE_PORT: o.nodePort }),
        ...(o.runtime && { SPACE_RUNTIME: o.runtime }),
      });
      const { runUp } = await import("./up.ts");
      await runUntilSignal(() => runUp(config));
    });

  program
    .command("api")
    .description("run the API server (ECW, Native, Admin) and the sandbox gateway")
    .action(async () => {
      const config = configFrom({});
      const { runApi } = await import("./processes.ts");
      await runUntilSignal(() => runApi(config));
    });

  program
    .command("controller")
    .description("run the cluster controller (dispatcher, timeouts, liveness); one replica leads")
    .action(async () => {
      const config = configFrom({});
      const { runController } = await import("./processes.ts");
      await runUntilSignal(() => runController(config));
    });

  const node = program
    .command("node")
    .description("run the node agent on this host; or manage the fleet's nodes (list, show, drain, fence, ready, delete)")
    .action(async () => {
      const config = configFrom({});
      const { runNode } = await import("./processes.ts");
      await runUntilSignal(() => runNode(config));
    });
  type AdminFlags = { apiUrl?: string; adminToken?: string; json?: boolean };
  const nodeAdmin = (name: string, description: string, action: (args: string[], o: AdminFlags & Record<string, unknown>) => NodeAdminAction) =>
    node
      .command(name)
      .description(description)
      .option("--api-url <url>", "SPACE API URL (default http://$SPACE_API_HOST:$SPACE_API_PORT)")
      .option("--admin-token <token>", "admin token (default $SPACE_ADMIN_TOKEN)")
      .option("--json", "print the API's JSON answer")
      .action(async (...args: unknown[]) => {
        // commander passes the positional arguments, then the options, then the command.
        const o = args[args.length - 2] as AdminFlags & Record<string, unknown>;
        const positional = args.slice(0, -2) as string[];
        const config = configFrom({});
        const adminToken = o.adminToken ?? config.SPACE_ADMIN_TOKEN;
        if (!adminToken) throw new SpaceError("invalid_argument", "set --admin-token or SPACE_ADMIN_TOKEN (printed by `space up`)");
        const apiUrl = o.apiUrl ?? `http://${config.SPACE_API_HOST}:${config.SPACE_API_PORT}`;
        const { runNodeAdmin } = await import("./node-admin.ts");
        process.stdout.write(`${await runNodeAdmin({ apiUrl, adminToken }, action(positional, o), o.json === true)}\n`);
      });
  nodeAdmin("list", "list the registered nodes", () => ({ kind: "list" }));
  nodeAdmin("show <node>", "show a node (id or name)", ([n]) => ({ kind: "show", node: n! }));
  nodeAdmin("drain <node>", "stop placing on a node; --forced also moves its sandboxes to other nodes", ([n], o) => ({
    kind: "drain",
    node: n!,
    forced: o.forced === true,
  })).option("--forced", "evacuate: suspend each sandbox to the blob store and restore it on another node");
  nodeAdmin("fence <node>", "refuse a node's writes and place nothing there", ([n], o) => ({
    kind: "fence",
    node: n!,
    ...(typeof o.reason === "string" ? { reason: o.reason } : {}),
  })).option("--reason <text>", "why (kept with the node)");
  nodeAdmin("ready <node>", "clear a drain or fence (alias: undrain)", ([n]) => ({ kind: "ready", node: n! })).alias("undrain");
  nodeAdmin("delete <node>", "forget a node that holds no sandboxes", ([n]) => ({ kind: "delete", node: n! }));

  program
    .command("migrate")
    .description("apply database migrations and exit")
    .action(async () => {
      const config = configFrom({});
      const { runMigrate } = await import("./processes.ts");
      await runMigrate(config);
    });

  program
    .command("version")
    .description("print the version")
    .action(() => {
      process.stdout.write(`space ${VERSION}\n`);
    });

  program
    .command("config")
    .description("list every SPACE_* variable with its default")
    .action(() => {
      process.stdout.write(describeConfig() + "\n");
    });

  program
    .command("template")
    .description("templates")
    .command("build <dir>")
    .description("build a template from <dir>/Dockerfile (FROM base|oci-archive:<path>, RUN, COPY, ENV, WORKDIR, USER, CMD)")
    .requiredOption("--name <name>", "template name[:tag]")
    .option("--file <file>", "Dockerfile name in <dir>", "Dockerfile")
    .option("--api-url <url>", "SPACE API URL (default $E2B_API_URL)")
    .option("--api-key <key>", "API key (default $E2B_API_KEY)")
    .option("--force", "rebuild every step (ignore the layer cache)")
    .action(async (dir: string, o: { name: string; file: string; apiUrl?: string; apiKey?: string; force?: boolean }) => {
      const { runTemplateBuild } = await import("./template.ts");
      const apiUrl = o.apiUrl ?? process.env.E2B_API_URL ?? "";
      const apiKey = o.apiKey ?? process.env.E2B_API_KEY ?? "";
      if (!apiUrl || !apiKey) throw new Error("set --api-url/--api-key or E2B_API_URL/E2B_API_KEY (printed by `space up`)");
      const r = await runTemplateBuild({ dir, name: o.name, file: o.file, apiUrl, apiKey, ...(o.force ? { force: true } : {}) });
      process.stdout.write(`${JSON.stringify(r)}\n`);
    });

  try {
    await program.parseAsync(argv);
  } catch (e: unknown) {
    if (e instanceof ConfigError) {
      process.stderr.write(`space: invalid configuration:\n${e.message}\n`);
      process.exit(2);
    }
    if (e instanceof SpaceError) {
      process.stderr.write(`space: ${e.message}\n`);
      process.exit(1);
    }
    const code = (e as { code?: string }).code;
    if (code === "commander.helpDisplayed" || code === "commander.version" || code === "commander.help") process.exit(0);
    if (typeof code === "string" && code.startsWith("commander.")) process.exit(2);
    process.stderr.write(`space: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  }
}
