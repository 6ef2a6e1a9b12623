/**
 * `space tenant list|create|info|disable`, `space key create|list|revoke`, `space token
 * create|list|revoke`: tenants and their credentials over the Admin API (admin token).
 * A tenant is named by its id or its name.
 */
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import { contextOf, type CommandContext } from "../client/context.ts";
import { printFields, printJson, printLine, printTable } from "../client/output.ts";
import { positiveInt } from "./sandbox-commands.ts";

interface Tenant {
  id: string;
  name: string;
  createdAt: string;
  disabledAt: string | null;
}
interface ApiKey {
  id: string;
  name: string;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}
interface Token extends ApiKey {
  scopes: string[];
  expiresAt: string | null;
}

/** The scopes a token may carry (src/api/auth.ts `tenantScopes`, plus `admin`). */
export const TOKEN_SCOPES = ["sandboxes:read", "sandboxes:write", "commands:exec", "templates:read", "templates:write", "volumes:read", "volumes:write", "credentials:read", "credentials:write", "admin"] as const;

async function tenantIdOf(ctx: CommandContext, ref: string): Promise<string> {
  const { tenants } = await ctx.client.admin<{ tenants: Tenant[] }>("GET", "/tenants");
  const hit = tenants.find((t) => t.id === ref) ?? tenants.find((t) => t.name === ref);
  if (!hit) throw new SpaceError("not_found", `no tenant has the id or name ${ref} (space tenant list shows them)`);
  return hit.id;
}

const tenantOption = (c: Command) => c.requiredOption("--tenant <tenant>", "tenant id or name");

export function registerTenantCommands(program: Command): void {
  const tenant = program
    .command("tenant")
    .description("tenants (the isolation boundary): list, create, info, disable — Admin API")
    .addHelpText("after", "\nExamples:\n  $ space tenant create acme\n  $ space key create --tenant acme --name ci\n  $ space tenant disable acme");

  tenant
    .command("list")
    .alias("ls")
    .description("list tenants")
    .action(async (_o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { tenants } = await ctx.client.admin<{ tenants: Tenant[] }>("GET", "/tenants");
      if (ctx.out.json) return printJson(tenants);
      printTable(
        ["NAME", "ID", "CREATED", "DISABLED"],
        tenants.map((t) => [t.name, t.id, t.createdAt, t.disabledAt]),
      );
    });

  tenant
    .command("create <name>")
    .description("create a tenant; prints its id")
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const t = await ctx.client.admin<Tenant>("POST", "/tenants", { name });
      if (ctx.out.json) return printJson(t);
      printLine(t.id);
    });

  tenant
    .command("info <tenant>")
    .alias("get")
    .description("show a tenant (id or name)")
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const t = await ctx.client.admin<Tenant>("GET", `/tenants/${await tenantIdOf(ctx, ref)}`);
      if (ctx.out.json) return printJson(t);
      printFields({ ...t });
    });

  tenant
    .command("disable <tenant>")
    .description("disable a tenant: its keys and tokens stop working at once")
    .action(async (ref: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const t = await ctx.client.admin<Tenant>("POST", `/tenants/${await tenantIdOf(ctx, ref)}/disable`, {});
      if (ctx.out.json) return printJson(t);
      printLine(`tenant ${t.name} (${t.id}) disabled`);
    });

  const key = program
    .command("key")
    .description("API keys of a tenant (E2B's X-API-KEY): create, list, revoke — Admin API")
    .addHelpText("after", "\nExamples:\n  $ export E2B_API_KEY=$(space key create --tenant acme)\n  $ space key list --tenant acme\n  $ space key revoke --tenant acme <key id>");

  tenantOption(key.command("create"))
    .description("create an API key; prints the key (shown once)")
    .option("--name <name>", "a name to tell keys apart")
    .action(async (o: { tenant: string; name?: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const k = await ctx.client.admin<ApiKey & { key: string }>("POST", `/tenants/${await tenantIdOf(ctx, o.tenant)}/keys`, o.name ? { name: o.name } : {});
      if (ctx.out.json) return printJson(k);
      printLine(k.key);
    });

  tenantOption(key.command("list").alias("ls"))
    .description("list a tenant's API keys (prefixes only)")
    .action(async (o: { tenant: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { keys } = await ctx.client.admin<{ keys: ApiKey[] }>("GET", `/tenants/${await tenantIdOf(ctx, o.tenant)}/keys`);
      if (ctx.out.json) return printJson(keys);
      printTable(
        ["ID", "NAME", "PREFIX", "CREATED", "LAST USED", "REVOKED"],
        keys.map((k) => [k.id, k.name, `${k.prefix}…`, k.createdAt, k.lastUsedAt, k.revokedAt]),
      );
    });

  tenantOption(key.command("revoke <key>"))
    .description("revoke an API key (by id)")
    .action(async (id: string, o: { tenant: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      await ctx.client.admin("DELETE", `/tenants/${await tenantIdOf(ctx, o.tenant)}/keys/${encodeURIComponent(id)}`);
      if (ctx.out.json) return printJson({ revoked: id });
      printLine(`revoked key ${id}`);
    });

  const token = program
    .command("token")
    .description("scoped bearer tokens of a tenant (Native API): create, list, revoke — Admin API")
    .addHelpText(
      "after",
      `
Scopes: ${TOKEN_SCOPES.join(", ")}.

Examples:
  $ space token create --tenant acme --scope sandboxes:read,commands:exec --expires-in 86400
  $ space token list --tenant acme
  $ space token revoke --tenant acme <token id>`,
    );

  tenantOption(token.command("create"))
    .description("create a token; prints the token (shown once)")
    .requiredOption("--scope <scopes>", `comma-separated scopes (${TOKEN_SCOPES.join(", ")})`)
    .option("--name <name>", "a name to tell tokens apart")
    .option("--expires-in <seconds>", "lifetime in seconds (default: never expires)", positiveInt("--expires-in"))
    .action(async (o: { tenant: string; scope: string; name?: string; expiresIn?: number }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const scopes = o.scope
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean);
      const unknown = scopes.filter((s) => !(TOKEN_SCOPES as readonly string[]).includes(s));
      if (unknown.length) throw new SpaceError("invalid_argument", `--scope: unknown scope ${unknown.join(", ")} (known: ${TOKEN_SCOPES.join(", ")})`);
      const t = await ctx.client.admin<Token & { token: string }>("POST", `/tenants/${await tenantIdOf(ctx, o.tenant)}/tokens`, {
        scopes,
        ...(o.name ? { name: o.name } : {}),
        ...(o.expiresIn !== undefined ? { expires_in_s: o.expiresIn } : {}),
      });
      if (ctx.out.json) return printJson(t);
      printLine(t.token);
    });

  tenantOption(token.command("list").alias("ls"))
    .description("list a tenant's tokens (prefixes only)")
    .action(async (o: { tenant: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      const { tokens } = await ctx.client.admin<{ tokens: Token[] }>("GET", `/tenants/${await tenantIdOf(ctx, o.tenant)}/tokens`);
      if (ctx.out.json) return printJson(tokens);
      printTable(
        ["ID", "NAME", "PREFIX", "SCOPES", "EXPIRES", "LAST USED", "REVOKED"],
        tokens.map((t) => [t.id, t.name, `${t.prefix}…`, t.scopes.join(","), t.expiresAt, t.lastUsedAt, t.revokedAt]),
      );
    });

  tenantOption(token.command("revoke <token>"))
    .description("revoke a token (by id)")
    .action(async (id: string, o: { tenant: string }, cmd: Command) => {
      const ctx = contextOf(cmd);
      await ctx.client.admin("DELETE", `/tenants/${await tenantIdOf(ctx, o.tenant)}/tokens/${encodeURIComponent(id)}`);
      if (ctx.out.json) return printJson({ revoked: id });
      printLine(`revoked token ${id}`);
    });
}
