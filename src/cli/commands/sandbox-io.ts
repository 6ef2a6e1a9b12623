/**
 * `space sandbox exec|shell|cp`: a sandbox's envd through the gateway, with the e2b SDK as
 * the client (Connect process and filesystem RPCs, signed file URLs), so the CLI speaks
 * exactly what SDK users speak.
 */
import { readFile, stat, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Command } from "commander";
import { SpaceError } from "../../core/errors.ts";
import { connectSandbox, contextOf, sdkFailure, type CommandContext } from "../client/context.ts";
import { printJson, printLine } from "../client/output.ts";

/** `a b 'c d'`: argv as one shell line (a single argument is taken as a shell line itself, as ssh does). */
export function shellLine(argv: string[]): string {
  if (argv.length === 1) return argv[0]!;
  return argv.map((a) => (/^[A-Za-z0-9_./:=@%+,-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(" ");
}

/** `<id>:/path` → remote; anything else is a local path. */
export function parseCpPath(arg: string): { sandboxId: string; path: string } | { local: string } {
  const m = /^([A-Za-z0-9_-]+):(\/.*)$/.exec(arg);
  return m ? { sandboxId: m[1]!, path: m[2]! } : { local: arg };
}

async function exec(ctx: CommandContext, id: string, argv: string[], o: { cwd?: string; user?: string; env?: Record<string, string> }): Promise<number> {
  const sbx = await connectSandbox(ctx, id);
  const { CommandExitError } = await import("e2b");
  try {
    const r = await sbx.commands.run(shellLine(argv), {
      timeoutMs: 0,
      ...(o.cwd ? { cwd: o.cwd } : {}),
      ...(o.user ? { user: o.user } : {}),
      ...(o.env ? { envs: o.env } : {}),
      ...(ctx.out.json ? {} : { onStdout: (d: string) => void process.stdout.write(d), onStderr: (d: string) => void process.stderr.write(d) }),
    });
    if (ctx.out.json) printJson({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr });
    return r.exitCode;
  } catch (e: unknown) {
    if (e instanceof CommandExitError) {
      if (ctx.out.json) printJson({ exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr, error: e.error ?? null });
      return e.exitCode;
    }
    throw await sdkFailure(e, ctx);
  }
}

async function shell(ctx: CommandContext, id: string, o: { user?: string }): Promise<number> {
  const sbx = await connectSandbox(ctx, id);
  const stdin = process.stdin;
  const size = () => ({ cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 });
  let handle: Awaited<ReturnType<typeof sbx.pty.create>>;
  try {
    handle = await sbx.pty.create({
      ...size(),
      timeoutMs: 0,
      ...(o.user ? { user: o.user } : {}),
      onData: (d: Uint8Array) => void process.stdout.write(d),
    });
  } catch (e: unknown) {
    throw await sdkFailure(e, ctx);
  }
  const pid = handle.pid;
  const raw = stdin.isTTY === true;
  if (raw) stdin.setRawMode(true);
  // Keystrokes in order: each waits for the one before it.
  let sending = Promise.resolve();
  const onInput = (chunk: Buffer) => {
    sending = sending.then(() => sbx.pty.sendInput(pid, new Uint8Array(chunk)).catch(() => undefined));
  };
  const onResize = () => void sbx.pty.resize(pid, size()).catch(() => undefined);
  // Piped input: its end is the shell's end of input, as Ctrl-D would be.
  const onEnd = () => onInput(Buffer.from([4]));
  stdin.on("data", onInput);
  if (!raw) stdin.once("end", onEnd);
  process.on("SIGWINCH", onResize);
  try {
    const r = await handle.wait();
    return r.exitCode;
  } catch (e: unknown) {
    const exitCode = (e as { exitCode?: unknown }).exitCode;
    if (typeof exitCode === "number") return exitCode;
    throw await sdkFailure(e, ctx);
  } finally {
    stdin.off("data", onInput);
    stdin.off("end", onEnd);
    process.off("SIGWINCH", onResize);
    if (raw) stdin.setRawMode(false);
    stdin.pause();
  }
}

async function cp(ctx: CommandContext, src: string, dst: string): Promise<{ from: string; to: string; bytes: number }> {
  const from = parseCpPath(src);
  const to = parseCpPath(dst);
  if ("local" in from && "local" in to) throw new SpaceError("invalid_argument", "one side of cp must be <sandbox id>:/path (e.g. space sandbox cp ./a.txt <id>:/home/user/a.txt)");
  if (!("local" in from) && !("local" in to)) throw new SpaceError("invalid_argument", "cp copies between this machine and a sandbox: one side must be a local path");
  if ("local" in from && !("local" in to)) {
    const st = await stat(from.local);
    if (st.isDirectory()) throw new SpaceError("invalid_argument", `${from.local} is a directory: cp copies one file`);
    const bytes = await readFile(from.local);
    const sbx = await connectSandbox(ctx, to.sandboxId);
    const target = to.path.endsWith("/") ? `${to.path}${basename(from.local)}` : to.path;
    try {
      await sbx.files.write(target, new Uint8Array(bytes).buffer);
    } catch (e: unknown) {
      throw await sdkFailure(e, ctx);
    }
    return { from: src, to: `${to.sandboxId}:${target}`, bytes: bytes.length };
  }
  if (!("local" in from) && "local" in to) {
    const sbx = await connectSandbox(ctx, from.sandboxId);
    let data: Uint8Array;
    try {
      data = await sbx.files.read(from.path, { format: "bytes" });
    } catch (e: unknown) {
      throw await sdkFailure(e, ctx);
    }
    const isDir = await stat(to.local).then(
      (s) => s.isDirectory(),
      () => false,
    );
    const target = isDir ? join(to.local, basename(from.path)) : to.local;
    await writeFile(target, data);
    return { from: src, to: target, bytes: data.length };
  }
  throw new SpaceError("invalid_argument", "cp: unreachable");
}

export function registerSandboxIo(sandbox: Command): void {
  sandbox
    .command("exec <id> <command...>")
    .description("run a command in a sandbox; exits with the command's exit code")
    .option("--cwd <dir>", "working directory")
    .option("--user <user>", "run as this user (default: the template's)")
    .option("--env <k=v>", "environment variable (repeatable)", (v: string, prev: Record<string, string> = {}) => {
      const i = v.indexOf("=");
      if (i <= 0) throw new SpaceError("invalid_argument", `--env takes KEY=VALUE (got ${JSON.stringify(v)})`);
      return { ...prev, [v.slice(0, i)]: v.slice(i + 1) };
    })
    .addHelpText(
      "after",
      `
Put -- before the command so its own flags reach it. One argument is run as a shell line.
With --json: {"exitCode", "stdout", "stderr"} once the command ends.

Examples:
  $ space sandbox exec <id> -- ls -la /
  $ space sandbox exec <id> -- 'echo $HOME | wc -c'`,
    )
    .action(async (id: string, argv: string[], o: { cwd?: string; user?: string; env?: Record<string, string> }, cmd: Command) => {
      process.exitCode = await exec(contextOf(cmd), id, argv, o);
    });

  sandbox
    .command("shell <id>")
    .description("an interactive terminal in a sandbox (a PTY through envd; resizes follow the window)")
    .option("--user <user>", "log in as this user (default: the template's)")
    .addHelpText("after", "\nLeave with `exit` or Ctrl-D.\n\nExample:\n  $ space sandbox shell <id>")
    .action(async (id: string, o: { user?: string }, cmd: Command) => {
      process.exitCode = await shell(contextOf(cmd), id, o);
    });

  sandbox
    .command("cp <src> <dst>")
    .description("copy one file between this machine and a sandbox (<id>:/path names the sandbox side)")
    .addHelpText("after", "\nExamples:\n  $ space sandbox cp ./data.csv <id>:/home/user/\n  $ space sandbox cp <id>:/home/user/out.png ./out.png")
    .action(async (src: string, dst: string, _o: unknown, cmd: Command) => {
      const ctx = contextOf(cmd);
      const r = await cp(ctx, src, dst);
      if (ctx.out.json) return printJson(r);
      printLine(`${r.from} → ${r.to} (${r.bytes} bytes)`);
    });
}
