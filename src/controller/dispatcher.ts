/**
 * The public-operation dispatcher (behaviours.md A). Each tick (SPACE_CONTROLLER_TICK_MS,
 * 25 ms) it claims up to SPACE_CONTROLLER_CLAIM_LIMIT operations with
 * `FOR UPDATE SKIP LOCKED` — queued ones, and claimed ones whose claimer stopped
 * heartbeating for SPACE_CONTROLLER_CLAIM_STALE_MS (it died) — and wakes at once on
 * `NOTIFY space_operations`, so pickup does not wait for a tick.
 *
 * Handlers run concurrently (a slow create never blocks later work); operations on one
 * sandbox's lifecycle (kinds the table in src/operations/operation-kind.ts marks
 * `serialised`: `sandbox.*`, with the same target) run one after another in this
 * replica so pause/resume/delete do not interleave on the node. Several replicas never
 * run one operation twice: claims are row-locked, and heartbeat/finish are fenced by
 * (claimer, claim count).
 */
import { hostname } from "node:os";
import { randomId } from "../core/ids.ts";
import { SpaceError, toOperationFailure, type OperationFailureCode } from "../core/errors.ts";
import type { Config } from "../core/config.ts";
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import type { SandboxService } from "../sandboxes/service.ts";
import { spaceMetrics, type OperationMetrics } from "../core/metrics.ts";
import { continuingTrace, inSpan } from "../core/tracing.ts";
import type { HandlerMap } from "../operations/handler.ts";
import { isOperationKind, operationKindTable } from "../operations/operation-kind.ts";
import { createOperationHandlers } from "../operations/operation-handlers.ts";
import {
  OPERATIONS_CHANNEL,
  claimOperationsUnsynced,
  completeOperation,
  expireOperations,
  failOperation,
  heartbeatOperations,
  releaseOperations,
  type Operation as OperationRow,
} from "../store/operations.ts";

type Outcome =
  | { state: "succeeded"; result: unknown }
  | { state: "failed"; failure: { code: OperationFailureCode; message: string } };

export interface DispatcherDeps {
  db: Db;
  config: Pick<Config, "SPACE_CONTROLLER_TICK_MS" | "SPACE_CONTROLLER_CLAIM_LIMIT" | "SPACE_CONTROLLER_CLAIM_STALE_MS">;
  log: Logger;
  /** The shared sandbox service; the default handlers act through it. */
  sandboxes?: SandboxService;
  /** kind → handler; defaults to `createOperationHandlers({ db, sandboxes, log })`. */
  handlers?: HandlerMap;
  /** Unique per process; defaults to `<host>-<pid>-<random>`. */
  workerId?: string;
  /** Operations run at once by this replica (default 512). */
  maxInFlight?: number;
  /** How long an operation failing with `unavailable` is retried (backoff) before it fails (default 120 s, capped by its deadline). */
  retryUnavailableMs?: number;
  /** Claims and outcomes (core/metrics.ts); absent = unregistered. */
  metrics?: OperationMetrics;
}

export interface Dispatcher {
  readonly workerId: string;
  /** Stops claiming, cancels running handlers and hands their operations back to the queue. */
  stop(): Promise<void>;
}

const STOP_REASON = "dispatcher stopping";

export async function startDispatcher(deps: DispatcherDeps): Promise<Dispatcher> {
  const { db, log } = deps;
  const claimLimit = deps.config.SPACE_CONTROLLER_CLAIM_LIMIT;
  const staleMs = deps.config.SPACE_CONTROLLER_CLAIM_STALE_MS;
  /**
   * The poll behind NOTIFY. PGlite is embedded: every operation is written by this process
   * (the data dir is locked) and its NOTIFY reaches the listener in-process, never lost, so
   * polling there only finds claims gone stale (a previous run's) — a quarter of the
   * staleness window is soon enough. Polling every tick held PGlite's one connection for a
   * few ms 40 times a second, in front of every request's queries.
   */
  const tickMs = db.engine === "pglite" ? Math.max(deps.config.SPACE_CONTROLLER_TICK_MS, Math.floor(staleMs / 4)) : deps.config.SPACE_CONTROLLER_TICK_MS;
  const maxInFlight = deps.maxInFlight ?? 512;
  const retryUnavailableMs = deps.retryUnavailableMs ?? 120_000;
  const metrics = deps.metrics ?? spaceMetrics().operations;
  const workerId = deps.workerId ?? `${hostname()}-${process.pid}-${randomId(6)}`;
  const handlers: HandlerMap =
    deps.handlers ??
    (() => {
      if (!deps.sandboxes) throw new SpaceError("internal", "startDispatcher needs `sandboxes` or `handlers`");
      return createOperationHandlers({ db, sandboxes: deps.sandboxes, log });
    })();

  /**
   * Every operation this worker holds a claim on, running or waiting behind another
   * operation on the same sandbox: all are heartbeated (a waiting claim must not go
   * stale and be run again elsewhere) and all are handed back on stop.
   */
  const inFlight = new Map<string, { op: OperationRow; abort: AbortController }>();
  /** target → tail of the chain of lifecycle operations on it (in this replica). */
  const chains = new Map<string, Promise<void>>();
  let stopped = false;
  let wakeUp: (() => void) | undefined;
  let pokes = 0;
  const poke = () => {
    pokes++;
    wakeUp?.();
  };

  const unlisten = await db.listen(OPERATIONS_CHANNEL, poke);

  const hb = setInterval(
    () => {
      const ids = [...inFlight.keys()];
      heartbeatOperations(db, workerId, ids).then(
        (held) => {
          const kept = new Set(held);
          for (const id of ids.filter((x) => !kept.has(x))) {
            const f = inFlight.get(id);
            if (!f) continue;
            log.warn({ opId: id, kind: f.op.kind }, "operation claim lost (re-claimed elsewhere); cancelling local run");
            f.abort.abort(new SpaceError("aborted", "claim lost"));
          }
        },
        (e: unknown) => log.warn({ err: e }, "operation heartbeat failed"),
      );
    },
    Math.max(100, Math.floor(staleMs / 3)),
  );
  hb.unref();
  // Queued operations past their deadline fail even when no dispatcher gets to them.
  const expiry = setInterval(() => {
    expireOperations(db).catch((e: unknown) => log.warn({ err: e }, "expiring operations failed"));
  }, 1000);
  expiry.unref();

  async function run(op: OperationRow): Promise<void> {
    const held = inFlight.get(op.id);
    if (!held) return; // handed back or lost while it waited
    const abort = held.abort;
    let deadlineTimer: NodeJS.Timeout | undefined;
    let outcome: Outcome;
    try {
      const left = op.deadlineAt ? op.deadlineAt.getTime() - Date.now() : Number.POSITIVE_INFINITY;
      if (left <= 0) throw deadlineError(op);
      if (Number.isFinite(left)) {
        deadlineTimer = setTimeout(() => abort.abort(deadlineError(op)), Math.min(left, 2 ** 31 - 1));
        deadlineTimer.unref();
      }
      if (abort.signal.aborted) throw abort.signal.reason;
      const handler = handlers[op.kind];
      if (!handler) throw new SpaceError("unimplemented", `no handler for operation kind ${op.kind}`);
      const opLog = log.child({ opId: op.id, kind: op.kind });
      const retryUntil = Math.min(Date.now() + retryUnavailableMs, op.deadlineAt?.getTime() ?? Number.POSITIVE_INFINITY);
      let result: unknown;
      for (let attempt = 1; ; attempt++) {
        try {
          result = await continuingTrace(op.traceParent, () =>
            inSpan(`controller ${op.kind}`, "controller", { "space.operation.id": op.id, "space.operation.attempt": attempt }, () =>
              raceAbort(handler({ op, signal: abort.signal, log: opLog }), abort.signal),
            ),
          );
          break;
        } catch (e: unknown) {
          // A dependency that is down (node restarting, no ready node yet) is waited out
          // with backoff instead of failing the operation; handlers are safe to re-run.
          // Kinds whose handler reattaches by itself (commands) are excluded.
          const err = SpaceError.from(e);
          const delayMs = Math.min(250 * 2 ** (attempt - 1), 5000);
          if (abort.signal.aborted || err.code !== "unavailable" || !policyOf(op.kind).retriesUnavailable || Date.now() + delayMs > retryUntil) throw e;
          opLog.warn({ attempt, msg: err.message, delayMs }, "operation hit an unavailable dependency; retrying");
          metrics.finished.inc({ kind: op.kind, result: "retried" });
          await new Promise((r) => setTimeout(r, delayMs));
          if (abort.signal.aborted) throw abort.signal.reason;
        }
      }
      outcome = { state: "succeeded", result: result ?? null };
    } catch (e: unknown) {
      const reason: unknown = abort.signal.aborted ? abort.signal.reason : undefined;
      if (reason instanceof SpaceError && (reason.message === STOP_REASON || reason.message === "claim lost")) {
        // Not ours to finish: stopping hands it back; a lost claim belongs to another worker.
        return;
      }
      const err = SpaceError.from(reason instanceof SpaceError && reason.code === "deadline_exceeded" ? reason : e);
      outcome = { state: "failed", failure: { code: toOperationFailure(err.code), message: err.message } };
      if (err.code === "internal" || err.code === "unimplemented") log.error({ opId: op.id, kind: op.kind, err: e }, "operation failed");
      else log.info({ opId: op.id, kind: op.kind, code: err.code, msg: err.message }, "operation failed");
    } finally {
      if (deadlineTimer) clearTimeout(deadlineTimer);
      inFlight.delete(op.id);
    }
    metrics.finished.inc({ kind: op.kind, result: outcome.state });
    try {
      if (outcome.state === "succeeded") await completeOperation(db, op.id, outcome.result, { claimer: workerId });
      else await failOperation(db, op.id, outcome.failure, { claimer: workerId });
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      if (err.code === "aborted" || err.code === "failed_precondition") {
        // Re-claimed elsewhere, or already ended (e.g. expired at its deadline): theirs.
        log.warn({ opId: op.id, msg: err.message }, "operation outcome dropped: no longer held by this worker");
      } else {
        // Left claimed: the staleness window hands it to another run (handlers re-run safely).
        log.error({ opId: op.id, err: e }, "could not record operation outcome");
      }
    }
  }

  function schedule(op: OperationRow): void {
    inFlight.set(op.id, { op, abort: new AbortController() });
    const key = policyOf(op.kind).serialised && op.targetId ? op.targetId : undefined;
    if (!key) {
      void run(op);
      return;
    }
    const prev = chains.get(key) ?? Promise.resolve();
    const next = prev.then(() => run(op));
    chains.set(key, next);
    void next.finally(() => {
      if (chains.get(key) === next) chains.delete(key);
    });
  }

  const claim = (limit: number) => claimOperationsUnsynced(db, { claimer: workerId, limit, staleMs });

  const loop = (async () => {
    while (!stopped) {
      const seen = pokes;
      let claimedFull = false;
      const room = Math.min(claimLimit, maxInFlight - inFlight.size);
      if (room > 0) {
        try {
          const ops = await claim(room);
          for (const op of ops) {
            metrics.claims.inc({ kind: op.kind });
            schedule(op);
          }
          claimedFull = ops.length === room;
        } catch (e: unknown) {
          if (!stopped) log.warn({ err: e }, "claiming operations failed");
        }
      }
      if (stopped) break;
      // A full batch or a NOTIFY during the claim: more may be waiting, claim again now.
      if ((claimedFull && inFlight.size < maxInFlight) || pokes !== seen) continue;
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, tickMs);
        function done() {
          clearTimeout(t);
          wakeUp = undefined;
          resolve();
        }
        wakeUp = done;
      });
    }
  })();

  log.info({ workerId, tickMs, claimLimit, staleMs }, "operation dispatcher started");

  return {
    workerId,
    async stop() {
      if (stopped) return;
      stopped = true;
      wakeUp?.();
      clearInterval(hb);
      clearInterval(expiry);
      await loop;
      await unlisten().catch(() => {});
      const held = [...inFlight.values()];
      for (const f of held) f.abort.abort(new SpaceError("canceled", STOP_REASON));
      // Hand the interrupted operations back so the next dispatcher starts them at once
      // instead of after the staleness window (handlers are safe to re-run).
      await releaseOperations(
        db,
        workerId,
        held.map((f) => f.op.id),
      ).catch((e: unknown) => log.warn({ err: e }, "could not hand back interrupted operations"));
      log.info({ workerId, handedBack: held.length }, "operation dispatcher stopped");
    },
  };
}

/** How the dispatcher runs a kind (operation-kind.ts); a kind outside the table (tests) runs alone and is retried. */
function policyOf(kind: string): { serialised: boolean; retriesUnavailable: boolean } {
  return isOperationKind(kind) ? operationKindTable[kind] : { serialised: false, retriesUnavailable: true };
}

function deadlineError(op: OperationRow): SpaceError {
  return new SpaceError("deadline_exceeded", `operation ${op.id} (${op.kind}) passed its deadline ${op.deadlineAt?.toISOString()}`);
}

/** Settles with the handler, or rejects as soon as the signal aborts (a handler that ignores its signal cannot hold the operation). */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e as Error);
      },
    );
  });
}
