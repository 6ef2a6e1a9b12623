/**
 * The node's health watchdog (issue 27 item 2): every `intervalMs` each running sandbox's
 * envd is asked for its log page (SandboxTelemetry.probe: the same pull a checkpoint's
 * quiesce waits for, so no probe is open while CRIU dumps). A lost link (veth cut, slot
 * gone) or a frozen envd (SIGSTOP, ptrace) answers nothing; after `threshold` such checks
 * in a row the sandbox is reported unhealthy with a reason, once: the caller fails its
 * record and kills it, so clients get an answer instead of a hang. A refusal (a status,
 * a bad page) is an answer: envd is alive. A sandbox that answers again starts over.
 * A round waits for the node's creates and adoptions to pause (foreground-activity.ts), at
 * most one interval.
 */
import type { Logger } from "../../core/log.ts";
import type { Observed } from "./sandbox-telemetry.ts";
import type { ForegroundActivity } from "../../core/foreground-activity.ts";
import { forEachLimit, Periodic } from "../../core/periodic.ts";

export interface SandboxHealthDeps {
  intervalMs: number;
  /** Consecutive unanswered checks that make a sandbox unhealthy. */
  threshold: number;
  /** The running sandboxes now. */
  running: () => Observed[];
  /** true answered, false no answer, undefined not checkable now (quiesced). */
  probe: (o: Observed) => Promise<boolean | undefined>;
  /** Reports it; resolves true when it was handled (reported again next check otherwise). */
  unhealthy: (id: string, reason: string) => Promise<boolean>;
  /** What a round yields to (creates, adoptions), for at most an interval: a check is deferred, not counted as missed. */
  foreground?: Pick<ForegroundActivity, "untilQuiet">;
  logger: Logger;
}

/** Sandboxes checked at once (the node's CPU is the sandboxes'). */
const CONCURRENCY = 8;

export class SandboxHealth {
  readonly #d: SandboxHealthDeps;
  readonly #misses = new Map<string, number>();
  readonly #handled = new Set<string>();
  readonly #rounds: Periodic;

  constructor(d: SandboxHealthDeps) {
    this.#d = d;
    this.#rounds = new Periodic(d.intervalMs, (signal) => this.tick(signal));
  }

  start(): void {
    this.#rounds.start();
  }

  stop(): Promise<void> {
    return this.#rounds.stop();
  }

  /** One round over the running sandboxes. */
  async tick(signal?: AbortSignal): Promise<void> {
    await this.#d.foreground?.untilQuiet(this.#d.intervalMs, signal);
    if (signal?.aborted) return;
    const todo = [...this.#d.running()];
    const here = new Set(todo.map((o) => o.id));
    for (const id of this.#misses.keys()) if (!here.has(id)) this.#misses.delete(id);
    for (const id of this.#handled) if (!here.has(id)) this.#handled.delete(id);
    await forEachLimit(todo, CONCURRENCY, (o) => this.#check(o));
  }

  async #check(o: Observed): Promise<void> {
    const ok = await this.#d.probe(o).catch(() => false);
    if (ok === undefined) return;
    if (ok) {
      this.#misses.delete(o.id);
      return;
    }
    const misses = (this.#misses.get(o.id) ?? 0) + 1;
    this.#misses.set(o.id, misses);
    if (misses < this.#d.threshold || this.#handled.has(o.id)) return;
    const reason = `envd did not answer ${misses} health checks in a row (every ${this.#d.intervalMs} ms): its network link is down or envd is frozen`;
    this.#d.logger.warn({ sandboxId: o.id, misses }, "sandbox unhealthy");
    try {
      if (await this.#d.unhealthy(o.id, reason)) this.#handled.add(o.id);
    } catch (e) {
      this.#d.logger.warn({ sandboxId: o.id, err: e }, "could not report an unhealthy sandbox; trying again at the next check");
    }
  }
}
