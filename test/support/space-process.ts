/**
 * A `space <command>` child process for end-to-end tests (standalone `space node`,
 * `space api`, `space controller`): its output kept for assertions and failure messages,
 * stopped with SIGTERM (SIGKILL after 30 s).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { resolve } from "node:path";
import { waitFor } from "./stack.ts";

export interface SpaceProcess {
  child: ChildProcess;
  out(): string;
  stop(signal?: NodeJS.Signals): Promise<void>;
  waitFor(text: string, timeoutMs: number): Promise<void>;
}

/** This process's environment without SPACE_* and E2B_* variables (each child gets only its own). */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith("SPACE_") && !k.startsWith("E2B_")) env[k] = v;
  return env;
}

export function runSpace(args: string[], env: Record<string, string>): SpaceProcess {
  const child = spawn(process.execPath, [resolve("bin/space.mjs"), ...args], {
    env: { ...baseEnv(), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const append = (b: Buffer) => {
    out += b.toString("utf8");
    if (out.length > 1_000_000) out = out.slice(-500_000);
  };
  child.stdout!.on("data", append);
  child.stderr!.on("data", append);
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  return {
    child,
    out: () => out,
    async stop(signal = "SIGTERM") {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      const t = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(t);
    },
    async waitFor(text, timeoutMs) {
      await waitFor(
        () => {
          if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}:\n${out.slice(-3000)}`);
          return out.includes(text);
        },
        `'${text}' from space ${args.join(" ")}:\n${out.slice(-2000)}`,
        timeoutMs,
        100,
      );
    },
  };
}
