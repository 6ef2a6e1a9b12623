/**
 * The real stack a review runs against: `space up` (test/support's runSpace) on a data
 * directory and host scope of its own, restartable on the same directory (the fault area
 * kills it with SIGKILL and starts it again), and stopped without the harness's clean-up
 * first, so host objects the stack itself left behind are seen before `dispose` removes
 * them.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cleanupOnSignal, removeNodeContainers, removeNodeNetwork } from "../../test/support/node-network-cleanup.ts";
import { runSpace, type SpaceProcess } from "../../test/support/space-process.ts";
import { freePort, hostScopeFor, nodeNetworkOf, removeDataDir } from "../../test/support/stack.ts";

export interface Endpoints {
  apiUrl: string;
  sandboxUrl: string;
  apiKey: string;
  adminToken: string;
}

export class ReviewStack {
  readonly dataDir = mkdtempSync(join(tmpdir(), "space-review-"));
  readonly env: Record<string, string>;
  proc: SpaceProcess | undefined;
  ep: Endpoints = { apiUrl: "", sandboxUrl: "", apiKey: "", adminToken: "" };
  /** Exits the review did not cause (not a stop or kill of its own), with the last output. */
  readonly crashes: string[] = [];
  #expectExit = false;
  #apiKey: string | undefined;
  #forget: () => void = () => {};

  private constructor(env: Record<string, string>) {
    this.env = env;
  }

  static async start(extra: Record<string, string> = {}): Promise<ReviewStack> {
    const ports = { SPACE_API_PORT: String(await freePort()), SPACE_GATEWAY_PORT: String(await freePort()), SPACE_NODE_PORT: String(await freePort()) };
    const s = new ReviewStack({});
    // A 10 s claim staleness (default 60 s): an operation the killed process had claimed is run again within the fault area's wait.
    Object.assign(s.env, { SPACE_DATA_DIR: s.dataDir, SPACE_LOG_LEVEL: "warn", SPACE_CONTROLLER_CLAIM_STALE_MS: "10000", ...hostScopeFor(s.dataDir), ...ports, ...extra });
    if (process.env.SPACE_BASE_TEMPLATE_DIR) s.env.SPACE_BASE_TEMPLATE_DIR = process.env.SPACE_BASE_TEMPLATE_DIR;
    // Ctrl-C of the review: what the stack holds goes too (its containers first: they keep mounts busy).
    s.#forget = cleanupOnSignal(() => {
      s.proc?.child.kill("SIGKILL");
      removeNodeContainers(s.env.SPACE_RUNTIME ?? "runc", s.stateDir);
      removeNodeNetwork(nodeNetworkOf(s.env));
      removeDataDir(s.dataDir);
    });
    await s.up();
    return s;
  }

  get stateDir(): string {
    return this.env.SPACE_NODE_RUNTIME_STATE_DIR!;
  }

  /** Starts (or restarts, on the same data directory) and waits until it printed its credentials. */
  async up(): Promise<void> {
    this.#expectExit = false;
    const proc = runSpace(["up"], this.env);
    this.proc = proc;
    proc.child.once("exit", (code, signal) => {
      if (!this.#expectExit && this.proc === proc) this.crashes.push(`space up exited on its own (${code ?? signal}): ${proc.out().slice(-1500)}`);
    });
    // Not SpaceProcess.waitFor: its poll swallows the "exited" error and waits out the deadline.
    for (const end = Date.now() + 10 * 60_000; !/^export SPACE_ADMIN_TOKEN=\S+\n/m.test(proc.out()); ) {
      if (proc.exited()) throw new Error(`space up exited (${proc.child.exitCode ?? proc.child.signalCode}) before it was up: ${proc.out().slice(-1500)}`);
      if (Date.now() > end) throw new Error(`space up not up after 10 min: ${proc.out().slice(-1500)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const v = (name: string) => new RegExp(`^export ${name}=(\\S+)$`, "m").exec(proc.out())?.[1] ?? "";
    this.ep = { apiUrl: v("E2B_API_URL"), sandboxUrl: v("E2B_SANDBOX_URL") || `http://127.0.0.1:${this.env.SPACE_GATEWAY_PORT}`, apiKey: this.#apiKey ?? v("E2B_API_KEY"), adminToken: v("SPACE_ADMIN_TOKEN") };
  }

  /** Uses this tenant's key from now on, across restarts (the Admin fuzzing may have disabled the first tenant). */
  useApiKey(key: string): void {
    this.#apiKey = key;
    this.ep = { ...this.ep, apiKey: key };
  }

  /** SIGKILL (the fault) or SIGTERM (a normal stop); either way not a crash. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    this.#expectExit = true;
    await this.proc?.stop(signal);
  }

  /** Everything the current process printed. */
  output(): string {
    return this.proc?.out() ?? "";
  }

  /** Removes whatever is left (containers, network, data directory), after the leak count. */
  async dispose(): Promise<void> {
    await this.stop();
    this.#forget();
    removeNodeContainers(this.env.SPACE_RUNTIME ?? "runc", this.stateDir);
    removeNodeNetwork(nodeNetworkOf(this.env));
    removeDataDir(this.dataDir);
  }
}
