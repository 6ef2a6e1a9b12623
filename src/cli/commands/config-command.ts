/**
 * `space config`: the values in effect and where each came from — every SPACE_* variable
 * (default, env, or a flag of the command), and the client connection (flag, env, the
 * local `space up`'s data directory, default). Secrets are masked; a URL's password too.
 */
import type { Command } from "commander";
import { configEntries, type ConfigEntry } from "../../core/config.ts";
import { loadConfig } from "../../core/config.ts";
import { environmentOf, type GlobalFlags } from "../client/context.ts";
import { maskSecret, resolveConnection, type Resolved } from "../client/connection.ts";
import { printJson, printLine, printTable } from "../client/output.ts";

const SECRET = /TOKEN|SECRET|PASSWORD|ENCRYPTION_KEY|ACCESS_KEY_ID|API_KEY/;

/** What may be shown of a value: secrets masked, `user:password@` of a URL masked. */
export function shown(name: string, value: string): string {
  if (!value) return value;
  if (SECRET.test(name)) return maskSecret(value);
  return value.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@\s]+):[^@/\s]+@/i, "$1:****@");
}

interface ShownEntry {
  name: string;
  value: string;
  source: string;
  origin?: string;
}

export function registerConfigCommand(program: Command): void {
  program
    .command("config")
    .description("show the configuration in effect: every SPACE_* variable and the client connection, with where each value came from")
    .option("--describe", "list every variable with its default and what it does")
    .addHelpText("after", "\nSecrets are masked (spa_****abcd). With --json: {client: {...}, variables: [...]}.\n\nExamples:\n  $ space config\n  $ space config --json\n  $ space config --describe")
    .action((o: { describe?: boolean }, cmd: Command) => {
      const env = environmentOf();
      const flags = cmd.optsWithGlobals<GlobalFlags>();
      const entries: ConfigEntry[] = configEntries(env);
      if (o.describe) {
        for (const e of entries) printLine(`${e.name}=${shown(e.name, e.default)}\n    ${e.description}`);
        return;
      }
      const conn = resolveConnection(flags, loadConfig(env), env);
      const client: Record<string, ShownEntry> = {};
      const add = (name: string, r: Resolved, secret: boolean) => {
        client[name] = { name, value: secret ? maskSecret(r.value) : r.value, source: r.source, ...(r.origin ? { origin: r.origin } : {}) };
      };
      add("api-url", conn.apiUrl, false);
      add("sandbox-url", conn.sandboxUrl, false);
      add("api-key", conn.apiKey, true);
      add("admin-token", conn.adminToken, true);
      const variables = entries.map((e) => ({ name: e.name, value: shown(e.name, e.value), source: e.source, default: shown(e.name, e.default) }));
      if (flags.json) return printJson({ client, variables });
      printLine("# client connection (space sandbox, template, tenant, key, token, pool, operation, node)");
      printTable(
        ["SETTING", "VALUE", "FROM"],
        Object.values(client).map((c) => [c.name, c.value || "(unset)", c.origin ? `${c.source} (${c.origin})` : c.source]),
      );
      printLine("# variables in effect, with where each came from (space config --describe says what each does)");
      const width = Math.max(...variables.map((v) => v.name.length + v.value.length + 1));
      for (const v of variables) printLine(`${`${v.name}=${v.value}`.padEnd(width)}  # ${v.source}`);
    });
}
