/**
 * What the node records about its sandboxes over time: a metrics sample every
 * `intervalMs` (E2B samples every 5 s) kept in a bounded history per sandbox, and envd's
 * log lines pulled into the SandboxLogStore at the same tick. Both outlive the sandbox's
 * stay on the node by `retentionMs` (kill, suspend), so `e2b sandbox logs` and
 * `getMetrics` of a sandbox that just ended still answer.
 *
 * The metrics history is in memory (a node agent restart starts it again); the logs are
 * on disk (sandbox-log-store.ts). Timestamps of samples are whole seconds, as E2B's
 * (`timestampUnix`), so the SDK's second-granular `start`/`end` select them exactly.
 *
 * Pulls reuse one kept-alive connection per sandbox: a node pulls from every idle sandbox,
 * and a new connection per pull cost envd ~70% and the node ~20% more CPU than a kept one
 * (docs/capacity.md).
 *
 * Both yield to the node's foreground work (core/foreground-activity.ts): a round, and a
 * sandbox's first observation, wait until no create or adoption ran for a moment, at most
 * one interval.
 *
 * Before a checkpoint the manager quiesces a sandbox: the tick leaves it alone, the
 * pull in flight is awaited, one last pull is made and the connection is closed, so no
 * node→envd connection is open while CRIU dumps the sandbox's sockets.
 */
import { Agent } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "../../core/log.ts";
import type { SandboxMetrics } from "../../contract/node-api.ts";
import type { SandboxLogEntry } from "../../contract/envd-logs.ts";
import type { LogQuery } from "../../contract/sandbox-logs.ts";
import { fetchEnvdLogs } from "./envd-http-client.ts";
import { SandboxLogStore, type EnvdTarget, type FetchPage } from "./sandbox-log-store.ts";
import { forEachPaced, Periodic } from "../../core/periodic.ts";
import type { ForegroundActivity } from "../../core/foreground-activity.ts";

export interface TelemetryOptions {
  /** Sampling (and log pull) interval. */
  intervalMs: number;
  /** Metrics samples kept per sandbox. */
  metricsSamples: number;
  /** Log entries kept per sandbox. */
  logEntries: number;
  /** How long both are kept after the sandbox left the node. */
  retentionMs: number;
}

export const DEFAULT_TELEMETRY: TelemetryOptions = { intervalMs: 5000, metricsSamples: 720, logEntries: 1000, retentionMs: 3_600_000 };

/** A sandbox as the tick sees it: running ones are sampled and pulled. */
export interface Observed {
  id: string;
  running: boolean;
  envd: EnvdTarget;
}

export interface SandboxTelemetryDeps {
  dir: string;
  options: TelemetryOptions;
  /** The node's sandboxes now. */
  observed: () => Observed[];
  sample: (id: string, signal: AbortSignal) => Promise<SandboxMetrics>;
  /** What samples and pulls yield to (creates, adoptions), each for at most an interval; none: they never wait. */
  foreground?: Pick<ForegroundActivity, "untilQuiet">;
  logger: Logger;
  fetchPage?: FetchPage;
  now?: () => number;
}

interface History {
  samples: SandboxMetrics[];
  endedAt?: number;
}

const PULL_TIMEOUT_MS = 2000;
/**
 * A sandbox's first sample and pull come this long after it arrived, not at once: then
 * they neither compete with its first requests (the create's answer, the first command)
 * nor land on a sandbox already gone (a sample of one ended reads nothing).
 */
const FIRST_OBSERVE_DELAY_MS = 1000;
/** Sandboxes sampled and pulled at once in a tick (the node's CPU is the sandboxes'). */
const TICK_CONCURRENCY = 4;
/**
 * A tick's share of its interval its sandboxes are spread over: walked as fast as it could,
 * 500 sandboxes' pulls held the node's event loop for ~0.3 s every interval, and the
 * commands passing through it then waited behind them.
 */
const TICK_SPREAD = 0.8;

export class SandboxTelemetry {
  readonly #d: SandboxTelemetryDeps;
  readonly #o: TelemetryOptions;
  readonly logs: SandboxLogStore;
  readonly #history = new Map<string, History>();
  readonly #quiet = new Set<string>();
  /** First observations waiting (FIRST_OBSERVE_DELAY_MS, then a quiet node), by sandbox: aborting one cancels it. */
  readonly #firsts = new Map<string, AbortController>();
  readonly #rounds: Periodic;
  readonly #now: () => number;
  /** When envd last answered a pull, by sandbox: a probe within its age needs no call of its own. */
  readonly #answered = new Map<string, number>();
  /** The kept-alive connection to its envd, by sandbox; closed when it is quiesced or leaves. */
  readonly #connections = new Map<string, Agent>();

  constructor(d: SandboxTelemetryDeps) {
    this.#d = d;
    this.#o = d.options;
    this.#now = d.now ?? Date.now;
    this.#rounds = new Periodic(d.options.intervalMs, (signal) => this.tick(signal, d.options.intervalMs * TICK_SPREAD));
    this.logs = new SandboxLogStore({
      dir: d.dir,
      maxEntries: d.options.logEntries,
      retentionMs: d.options.retentionMs,
      fetchPage: d.fetchPage ?? ((id, t, after, limit) => fetchEnvdLogs(t.host, t.port, t.accessToken, after, PULL_TIMEOUT_MS, this.#connection(id), limit)),
      logger: d.logger,
      ...(d.now ? { now: d.now } : {}),
    });
  }

  start(): void {
    this.#rounds.start();
  }

  async stop(): Promise<void> {
    for (const c of this.#firsts.values()) c.abort();
    this.#firsts.clear();
    await this.#rounds.stop();
    for (const id of [...this.#connections.keys()]) this.#close(id);
  }

  #connection(id: string): Agent {
    let a = this.#connections.get(id);
    if (!a) this.#connections.set(id, (a = new Agent({ keepAlive: true, maxSockets: 1 })));
    return a;
  }

  #close(id: string): void {
    this.#connections.get(id)?.destroy();
    this.#connections.delete(id);
  }

  /**
   * One round: sample and pull every running sandbox (a few at a time, spread over
   * `spreadMs`; none more once `signal` aborts), drop what outlived the retention.
   */
  async tick(signal: AbortSignal = new AbortController().signal, spreadMs = 0): Promise<void> {
    // Yielding to foreground work is bounded by one interval over the whole round (real time: `now` may be a test's clock).
    const deadline = performance.now() + this.#o.intervalMs;
    const yielded = () => this.#d.foreground?.untilQuiet(deadline - performance.now(), signal);
    await yielded();
    const all = this.#d.observed();
    const todo = all.filter((o) => o.running && !this.#quiet.has(o.id));
    await forEachPaced(todo, TICK_CONCURRENCY, spreadMs, signal, async (o) => {
      await yielded();
      if (!this.#quiet.has(o.id) && !signal.aborted) await this.#observe(o);
    });
    const here = new Set(all.map((o) => o.id));
    const now = this.#now();
    for (const [id, h] of this.#history) if (h.endedAt !== undefined && now - h.endedAt > this.#o.retentionMs) this.#history.delete(id);
    await this.logs.sweep((id) => here.has(id)).catch((e: unknown) => this.#d.logger.warn({ err: e }, "sandbox log sweep failed"));
  }

  async #observe(o: Observed): Promise<void> {
    await Promise.all([
      this.#sample(o.id).catch((e: unknown) => this.#d.logger.debug({ sandboxId: o.id, err: e }, "metrics sample failed")),
      this.#pull(o).catch((e: unknown) => this.#d.logger.debug({ sandboxId: o.id, err: e }, "envd log pull failed")),
    ]);
  }

  async #pull(o: Observed): Promise<void> {
    await this.logs.pull(o.id, o.envd);
    this.#answered.set(o.id, this.#now());
  }

  async #sample(id: string): Promise<SandboxMetrics> {
    const m = await this.#d.sample(id, AbortSignal.timeout(10_000));
    const sec = Math.floor(Date.parse(m.timestamp) / 1000) * 1000;
    const s = { ...m, timestamp: new Date(Number.isFinite(sec) ? sec : Math.floor(this.#now() / 1000) * 1000).toISOString() };
    let h = this.#history.get(id);
    if (!h) this.#history.set(id, (h = { samples: [] }));
    const last = h.samples.at(-1);
    if (!last || Date.parse(last.timestamp) < Date.parse(s.timestamp)) {
      h.samples.push(s);
      if (h.samples.length > this.#o.metricsSamples) h.samples.splice(0, h.samples.length - this.#o.metricsSamples);
    }
    return s;
  }

  /**
   * The sandbox is running here (created, started, restored): sampled and pulled shortly
   * (FIRST_OBSERVE_DELAY_MS), then every tick; one restored from another sandbox's
   * checkpoint is pulled at once too (its cursor). No I/O before it returns.
   */
  arrived(o: Observed, inherited: boolean): void {
    this.#quiet.delete(o.id);
    const h = this.#history.get(o.id);
    if (h) delete h.endedAt;
    this.logs.arrived(o.id, inherited);
    // Restored from another sandbox's checkpoint: its cursor starts at envd's head as of now,
    // so the pull that sets it cannot wait (lines logged meanwhile would be skipped as the source's).
    if (inherited) void this.logs.pull(o.id, o.envd).catch((e: unknown) => this.#d.logger.debug({ sandboxId: o.id, err: e }, "envd log pull failed"));
    this.#cancelFirst(o.id);
    const first = new AbortController();
    this.#firsts.set(o.id, first);
    void sleep(FIRST_OBSERVE_DELAY_MS, undefined, { signal: first.signal, ref: false })
      .then(() => this.#d.foreground?.untilQuiet(this.#o.intervalMs, first.signal))
      .then(
        () => {
          if (first.signal.aborted) return;
          this.#firsts.delete(o.id);
          if (!this.#quiet.has(o.id)) return this.#observe(o);
        },
        () => undefined, // cancelled
      );
  }

  #cancelFirst(id: string): void {
    this.#firsts.get(id)?.abort();
    this.#firsts.delete(id);
  }

  /** Before a checkpoint or an end: no more pulls until `resumed`; the last lines are read now. */
  async quiesce(o: Observed): Promise<void> {
    this.#quiet.add(o.id);
    this.#answered.delete(o.id);
    this.#cancelFirst(o.id);
    // Frozen (resident pause): envd cannot answer.
    if (o.running) await this.logs.pullFresh(o.id, o.envd).catch((e: unknown) => this.#d.logger.debug({ sandboxId: o.id, err: e }, "last envd log pull failed"));
    this.#close(o.id);
  }

  /**
   * Whether envd answers: a log pull, so it waits like the tick's for a checkpoint's
   * quiesce. undefined while quiet (being checkpointed or ended) or not running; false
   * only when no answer came (timeout, refused, unreachable), not for a refusal. A pull
   * envd answered in the last `answeredWithinMs` (the tick's) is the answer: an idle node
   * makes one call per sandbox per interval, not two.
   */
  async probe(o: Observed, answeredWithinMs = 0): Promise<boolean | undefined> {
    if (!o.running || this.#quiet.has(o.id)) return undefined;
    const last = this.#answered.get(o.id);
    if (last !== undefined && this.#now() - last < answeredWithinMs) return true;
    try {
      await this.#pull(o);
      return true;
    } catch (e) {
      if (this.#quiet.has(o.id)) return undefined;
      const err = e as { message?: string; code?: unknown };
      return !(err.message === "timeout" || typeof err.code === "string");
    }
  }

  resumed(id: string): void {
    this.#quiet.delete(id);
  }

  /** The sandbox left the node (killed, suspended, stopped): kept for the retention. */
  async left(id: string): Promise<void> {
    this.#quiet.delete(id);
    this.#answered.delete(id);
    this.#cancelFirst(id);
    const h = this.#history.get(id);
    if (h) h.endedAt = this.#now();
    await this.logs.left(id).catch((e: unknown) => this.#d.logger.warn({ sandboxId: id, err: e }, "sandbox logs could not be kept"));
    this.#close(id);
  }

  /** Entries selected by `q`; a running sandbox is pulled first so what it just logged is there. */
  async queryLogs(id: string, q: LogQuery, live: Observed | undefined): Promise<SandboxLogEntry[]> {
    if (live?.running && !this.#quiet.has(id)) await this.logs.pull(id, live.envd).catch(() => undefined);
    return this.logs.query(id, q);
  }

  /**
   * Samples with `startMs <= t <= endMs` (either open), oldest first. A running sandbox
   * with none in a range that reaches now gets one taken now (the first tick may not
   * have run yet).
   */
  async metrics(id: string, range: { startMs?: number; endMs?: number }, live: Observed | undefined): Promise<SandboxMetrics[]> {
    const pick = () =>
      (this.#history.get(id)?.samples ?? []).filter((m) => {
        const t = Date.parse(m.timestamp);
        return (range.startMs === undefined || t >= range.startMs) && (range.endMs === undefined || t <= range.endMs);
      });
    const out = pick();
    if (out.length || !live?.running) return out;
    const now = this.#now();
    if (range.endMs !== undefined && range.endMs < now - this.#o.intervalMs) return out;
    if (range.startMs !== undefined && range.startMs > now) return out;
    const s = await this.#sample(id);
    const t = Date.parse(s.timestamp);
    return (range.startMs === undefined || t >= range.startMs) && (range.endMs === undefined || t <= range.endMs) ? [s] : [];
  }
}
