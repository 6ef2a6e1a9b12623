/**
 * What every client command's action starts from: the global flags (`--api-url`,
 * `--api-key`, `--admin-token`, `--sandbox-url`, `--json`, `--debug`) merged with the
 * command's own, the resolved connection and an API client. Client commands share this,
 * so no command has its own idea of where the API is.
 */
import type { Command } from "commander";
import { loadConfig } from "../../core/config.ts";
import { SpaceError } from "../../core/errors.ts";
import { ApiClient, unreachable } from "./api-client.ts";
import { resolveConnection, type ClientFlags, type Connection } from "./connection.ts";
import { outOf, type Out } from "./output.ts";

export interface GlobalFlags extends ClientFlags {
  json?: boolean;
  debug?: boolean;
}

export interface CommandContext {
  client: ApiClient;
  conn: Connection;
  out: Out;
}

/** The process environment, handed in once by main() (no other module reads process.env). */
let environment: Record<string, string | undefined> = {};

export function setEnvironment(env: Record<string, string | undefined>): void {
  environment = env;
}

export function environmentOf(): Record<string, string | undefined> {
  return environment;
}

export function contextOf(cmd: Command): CommandContext {
  const flags = cmd.optsWithGlobals<GlobalFlags>();
  const conn = resolveConnection(flags, loadConfig(environment), environment);
  return { client: new ApiClient(conn), conn, out: outOf(flags.json === true) };
}

/** A sandbox's envd through the gateway, via the e2b SDK (commands, files, PTY). */
export async function connectSandbox(ctx: CommandContext, id: string) {
  const { Sandbox } = await import("e2b");
  try {
    return await Sandbox.connect(id, {
      apiKey: ctx.client.apiKey(),
      apiUrl: ctx.client.apiUrl,
      sandboxUrl: ctx.conn.sandboxUrl.value.replace(/\/+$/, ""),
      requestTimeoutMs: 120_000,
    });
  } catch (e: unknown) {
    throw await sdkFailure(e, ctx);
  }
}

/** The SDK's errors in the CLI's one-line, exit-coded form. */
export async function sdkFailure(e: unknown, ctx: CommandContext): Promise<unknown> {
  const sdk = await import("e2b");
  if (e instanceof SpaceError) return e;
  if (e instanceof sdk.NotFoundError || e instanceof sdk.SandboxNotFoundError) return new SpaceError("not_found", e.message);
  if (e instanceof sdk.AuthenticationError) return new SpaceError("unauthenticated", `${e.message}: set E2B_API_KEY or --api-key`);
  if (e instanceof sdk.InvalidArgumentError) return new SpaceError("invalid_argument", e.message);
  if (e instanceof TypeError && /fetch failed/.test(e.message)) return unreachable(ctx.client.apiUrl, e);
  if (e instanceof Error && /ECONNREFUSED|fetch failed/.test(e.message)) {
    return new SpaceError("unavailable", `cannot reach the sandbox gateway at ${ctx.conn.sandboxUrl.value}: set E2B_SANDBOX_URL or --sandbox-url (${e.message})`);
  }
  return e;
}
