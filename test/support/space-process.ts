/**
 * A `space <command>` child process for end-to-end tests and benches (`space up`,
 * `space api`, `space controller`, standalone `space node`), optionally inside a network
 * namespace: its output kept for assertions and failure messages, stopped with SIGTERM
 * (SIGKILL after 30 s).
 *
 * `SPACE_E2E_COMPILED=1` (or `compiled: true`) runs the compiled CLI instead
 * (`node dist/space/space.mjs`, `npm run build`) with a hook that refuses to load tsx or
 * any `.ts` file, so a suite proves the build runs without the TypeScript loader.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { waitFor } from "./wait.ts";

export interface SpaceProcess {
  child: ChildProcess;
  /** Everything it printed so far (stdout + stderr, the last 1-2 MB). */
  out(): string;
  /** Whether it has exited (by code or signal). */
  exited(): boolean;
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Resolves with the match once it printed `text`; rejects if it exits first. */
  waitFor(text: string | RegExp, timeoutMs: number): Promise<string>;
}

export interface SpaceProcessOptions {
  /** Run it inside this network namespace (/run/netns/<name>), via nsenter. */
  netns?: string;
  /** Its own process group (pid = pgid), as a terminal starts a foreground job: `kill(-pid)` reaches the whole group. */
  processGroup?: boolean;
  /** The compiled CLI without a TypeScript loader (default: SPACE_E2E_COMPILED=1). */
  compiled?: boolean;
}

/** `node <argv…>` that runs `space`: bin/space.mjs, or the compiled CLI with the no-TypeScript hook. */
export function spaceArgv(compiled = process.env.SPACE_E2E_COMPILED === "1"): string[] {
  if (!compiled) return [process.execPath, resolve("bin/space.mjs")];
  const entry = resolve("dist/space/space.mjs");
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run \`npm run build\``);
  return [process.execPath, "--import", resolve("test/support/no-typescript.mjs"), entry];
}

/** This process's environment without SPACE_* and E2B_* variables (each child gets only its own). */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith("SPACE_") && !k.startsWith("E2B_")) env[k] = v;
  return env;
}

/** Starts `space <args>` with `baseEnv()` plus `env`. */
export function runSpace(args: string[], env: Record<string, string>, opts: SpaceProcessOptions = {}): SpaceProcess {
  const argv = [...spaceArgv(opts.compiled), ...args];
  const spawnOpts = { env: { ...baseEnv(), ...env }, stdio: ["ignore", "pipe", "pipe"] as ["ignore", "pipe", "pipe"], detached: opts.processGroup ?? false };
  // nsenter execs the agent itself, so the pid is the agent's (kill -9 hits it, not a wrapper).
  const child = opts.netns
    ? spawn("nsenter", [`--net=/run/netns/${opts.netns}`, "--", ...argv], spawnOpts)
    : spawn(argv[0]!, argv.slice(1), spawnOpts);
  let out = "";
  const append = (b: Buffer) => {
    out += b.toString("utf8");
    if (out.length > 2_000_000) out = out.slice(-1_000_000);
  };
  child.stdout.on("data", append);
  child.stderr.on("data", append);
  const exitedP = new Promise<void>((r) => child.once("exit", () => r()));
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  const what = `space ${args.join(" ")}`;
  return {
    child,
    out: () => out,
    exited: gone,
    async stop(signal = "SIGTERM") {
      if (gone()) return;
      child.kill(signal);
      const t = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exitedP;
      clearTimeout(t);
    },
    waitFor: (text, timeoutMs) =>
      waitFor(
        () => {
          if (gone()) throw new Error(`${what} exited ${child.exitCode ?? child.signalCode}:\n${out.slice(-3000)}`);
          return (typeof text === "string" ? (out.includes(text) ? text : null) : text.exec(out)?.[0]) ?? undefined;
        },
        `'${String(text)}' from ${what}:\n${out.slice(-2000)}`,
        timeoutMs,
        100,
      ),
  };
}
