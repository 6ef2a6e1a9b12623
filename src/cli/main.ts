/**
 * The `space` command. Process commands (up, api, controller, node, migrate) parse their
 * config once, build their dependencies and run until SIGINT/SIGTERM. Client commands
 * (sandbox, template, tenant, key, token, pool, operation, volume, node list…) share one
 * connection convention (client/connection.ts) and one way to fail: a line on stderr
 * naming the fix and an exit code from client/cli-failure.ts (docs/cli.md).
 */
import { Command, Option } from "commander";
import { ConfigError, loadConfig, type Config, type VarName } from "../core/config.ts";
import { VERSION } from "../core/version.ts";
import { describeFailure, EXIT, type PortVariables } from "./client/cli-failure.ts";
import { contextOf, setEnvironment } from "./client/context.ts";
import { registerConfigCommand } from "./commands/config-command.ts";
import { registerOperationCommands } from "./commands/operation-commands.ts";
import { registerPoolCommands } from "./commands/pool-commands.ts";
import { registerSandboxCommands } from "./commands/sandbox-commands.ts";
import { registerTemplateCommands } from "./commands/template-commands.ts";
import { registerTenantCommands } from "./commands/tenant-commands.ts";
import { registerVolumeCommands } from "./commands/volume-commands.ts";
import type { NodeAdminAction } from "./node-admin.ts";

type Overrides = Partial<Record<VarName, string>>;

/** The ports a process command listens on, and what sets each (for EADDRINUSE). */
let listening: PortVariables = {};

function configFrom(overrides: Overrides, portFlags: Partial<Record<VarName, string>> = {}): Config {
  const config = loadConfig(process.env, overrides);
  listening = {};
  for (const name of ["SPACE_API_PORT", "SPACE_GATEWAY_PORT", "SPACE_NODE_PORT"] as const) {
    const port = config[name];
    if (port) (listening[port] ??= []).push(portFlags[name] ? `${name} (or ${portFlags[name]})` : name);
  }
  return config;
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
  setEnvironment(process.env);
  const program = new Command("space")
    .description("SPACE: isolated, stateful sandboxes for AI agents (E2B wire-compatible)")
    .version(VERSION)
    .option("--api-url <url>", "SPACE API URL (default $SPACE_API_URL, $E2B_API_URL, then the local `space up`'s)")
    .option("--sandbox-url <url>", "sandbox gateway URL for exec/shell/cp (default $SPACE_SANDBOX_URL, $E2B_SANDBOX_URL, then the local `space up`'s)")
    .option("--api-key <key>", "API key (default $E2B_API_KEY, then the local `space up`'s)")
    .option("--admin-token <token>", "admin token for tenant/key/token/pool/node (default $SPACE_ADMIN_TOKEN, then the local `space up`'s)")
    .option("--json", "print parseable JSON only (reads and most writes)")
    .addOption(new Option("--debug", "print stack traces of failures"))
    .configureHelp({ showGlobalOptions: true, sortSubcommands: false })
    .addHelpText(
      "after",
      `
Start SPACE on this machine with \`space up\`; the client commands then find it by
themselves (its data directory), or through SPACE_API_URL / E2B_API_URL.

Examples:
  $ space up
  $ id=$(space sandbox create base)
  $ space sandbox exec $id -- uname -a
  $ space sandbox shell $id
  $ space template build ./my-template --name my-env
  $ space tenant create acme && space key create --tenant acme
  $ space config

Exit codes: 0 ok, 1 error, 2 usage or invalid argument, 3 not found, 4 refused
(conflict, wrong state, quota), 5 API unreachable, 6 credentials refused;
\`space sandbox exec\` and \`shell\` exit with the command's own code.
Every command: space <command> --help. Reference: docs/cli.md.`,
    );
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
      const config = configFrom(
        {
          ...(o.dataDir && { SPACE_DATA_DIR: o.dataDir }),
          ...(o.port && { SPACE_API_PORT: o.port }),
          ...(o.gatewayPort && { SPACE_GATEWAY_PORT: o.gatewayPort }),
          ...(o.nodePort && { SPACE_NODE_PORT: o.nodePort }),
          ...(o.runtime && { SPACE_RUNTIME: o.runtime }),
        },
        { SPACE_API_PORT: "--port", SPACE_GATEWAY_PORT: "--gateway-port", SPACE_NODE_PORT: "--node-port" },
      );
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
    .addHelpText(
      "after",
      `
Without a subcommand: runs the node agent (SPACE_NODE_CONTROL_URL, SPACE_INTERNAL_TOKEN).
The subcommands manage the fleet over the Admin API (admin token).

Examples:
  $ space node list
  $ space node drain node-a --forced
  $ space node ready node-a`,
    )
    .action(async () => {
      const config = configFrom({});
      const { runNode } = await import("./processes.ts");
      await runUntilSignal(() => runNode(config));
    });
  const nodeAdmin = (name: string, description: string, action: (args: string[], o: Record<string, unknown>) => NodeAdminAction) =>
    node
      .command(name)
      .description(description)
      .action(async (...args: unknown[]) => {
        // commander passes the positional arguments, then the options, then the command.
        const cmd = args[args.length - 1] as Command;
        const o = args[args.length - 2] as Record<string, unknown>;
        const positional = args.slice(0, -2) as string[];
        const ctx = contextOf(cmd);
        const { runNodeAdmin } = await import("./node-admin.ts");
        process.stdout.write(`${await runNodeAdmin(ctx.client, action(positional, o), ctx.out.json)}\n`);
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
    .command("rotate-key")
    .description("re-wrap every stored snapshot and template data key from SPACE_ENCRYPTION_KEY_PREVIOUS to SPACE_ENCRYPTION_KEY (docs/operations.md §5.7)")
    .action(async () => {
      const config = configFrom({});
      const { runRotateKey } = await import("./processes.ts");
      await runRotateKey(config);
    });

  program
    .command("version")
    .description("print the version")
    .action((_o: unknown, cmd: Command) => {
      process.stdout.write(cmd.optsWithGlobals<{ json?: boolean }>().json ? `${JSON.stringify({ version: VERSION })}\n` : `space ${VERSION}\n`);
    });

  registerConfigCommand(program);
  registerSandboxCommands(program);
  registerTemplateCommands(program);
  registerTenantCommands(program);
  registerPoolCommands(program);
  registerOperationCommands(program);
  registerVolumeCommands(program);

  try {
    await program.parseAsync(argv);
    // A client command is done: idle keep-alive sockets (fetch, the SDK) must not hold the exit.
    process.exit(process.exitCode ?? EXIT.ok);
  } catch (e: unknown) {
    const code = (e as { code?: unknown }).code;
    if (code === "commander.helpDisplayed" || code === "commander.version" || code === "commander.help") process.exit(EXIT.ok);
    // commander has printed its one line (unknown command, missing argument) already.
    if (typeof code === "string" && code.startsWith("commander.")) process.exit(EXIT.usage);
    if (e instanceof ConfigError) {
      process.stderr.write(`space: invalid configuration:\n${e.message}\n`);
      process.exit(EXIT.usage);
    }
    const failure = describeFailure(e, listening);
    process.stderr.write(`space: ${failure.line}\n`);
    if (argv.includes("--debug")) process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(failure.exitCode);
  }
}
