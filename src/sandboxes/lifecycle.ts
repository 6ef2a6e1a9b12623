/**
 * The lifecycle of a live sandbox: kill, timeouts (set, refresh), suspend (E2B pause)
 * with its recovery, and connect (E2B resume), which restores a suspended sandbox.
 * Concurrent connects in one process share one restore; across processes the guarded
 * transition picks one restorer and the others wait for its outcome.
 */
import { SpaceError, notFound, publicMessage } from "../core/errors.ts";
import { newExecutionId, type NodeId, type SandboxId, type TenantId } from "../core/ids.ts";
import { secondsSince } from "../core/metrics.ts";
import { inSpan } from "../core/tracing.ts";
import type { SandboxRef, SandboxStatus, SnapshotDescriptor, SnapshotKind } from "../substrate/substrate.ts";
import { validateTimeout } from "./create-input.ts";
import { endAtOf, isLive, killableStates, pausedStates, type SandboxRecord, type SandboxState } from "./model.ts";
import type { Snapshot } from "./snapshot-repo.ts";
import { dropSnapshots, liveSandbox, placeFor, refuseWithVolumes, restoreHeld, SNAPSHOT_CALL_MS, specOf, toPublicState, type SandboxResources } from "./resources.ts";

export type ConnectResult = { sandbox: SandboxRecord; resumed: boolean };
export type ConnectOptions = { memory?: boolean; pinned?: boolean };

export class SandboxLifecycle {
  readonly #r: SandboxResources;
  /** Restores in flight in this process (sandbox id → its running record): concurrent connects share one. */
  readonly #restores = new Map<string, Promise<SandboxRecord>>();
  /** Publications behind pauses in this process (snapshot id → settled once durable, or once it failed). */
  readonly #publishing = new Map<string, Promise<boolean>>();

  constructor(r: SandboxResources) {
    this.#r = r;
  }

  /** Ends the sandbox. Not found when it is not live (so a second kill is 404). */
  async kill(tenantId: TenantId, id: string, reason = "killed by request"): Promise<void> {
    const rec = await liveSandbox(this.#r, tenantId, id);
    await this.killRecord(rec, reason);
  }

  /**
   * live → killing (routing stops at once: only `running` is routed) → node kill →
   * killed. An unreachable node does not keep the row alive: its reaper ends orphans
   * when it returns. Any other node error leaves the row `failed` with the reason.
   */
  async killRecord(rec: SandboxRecord, reason: string): Promise<void> {
    const killing = await this.#r.repo.transition(rec.id, killableStates, "killing");
    if (!killing) throw notFound(`sandbox ${rec.id} not found`); // another kill won
    this.#r.events.emit("ended", rec.id);
    const nodeId = killing.nodeId ?? rec.nodeId;
    if (nodeId) {
      try {
        await this.#r.substrate.kill({ sandboxId: rec.id, nodeId }, AbortSignal.timeout(60_000));
      } catch (e: unknown) {
        const err = SpaceError.from(e);
        if (err.code !== "unavailable" && err.code !== "deadline_exceeded") {
          await this.#r.repo.transition(rec.id, ["killing"], "failed", { failureMessage: `kill failed: ${err.code}: ${err.message}` });
          throw err;
        }
        this.#r.log.warn({ sandboxId: rec.id, nodeId, err: e }, "node unreachable during kill; marked killed");
        reason = `${reason} (node unreachable at kill time)`;
      }
    }
    await this.#r.repo.transition(rec.id, ["killing"], "killed", { failureMessage: reason });
    // Its suspend snapshots die with it (named ones outlive it); best effort.
    await dropSnapshots(this.#r, rec.id, { purpose: "suspend" });
  }


  /** E2B `timeout`: the end time becomes now + timeout (may shorten). */
  async setTimeout(tenantId: TenantId, id: string, timeoutSec: number): Promise<SandboxRecord> {
    validateTimeout(timeoutSec);
    const rec = await liveSandbox(this.#r, tenantId, id);
    const updated = await this.#r.repo.update(rec.id, { endAt: new Date(this.#r.now().getTime() + timeoutSec * 1000) });
    if (!updated) throw notFound(`sandbox ${id} not found`);
    return updated;
  }

  /** E2B `refreshes`: keep alive for at least `durationSec` more; never shortens. */
  async refresh(tenantId: TenantId, id: string, durationSec: number): Promise<SandboxRecord> {
    validateTimeout(durationSec, 0);
    const rec = await liveSandbox(this.#r, tenantId, id);
    return this.extend(rec, durationSec);
  }

  async extend(rec: SandboxRecord, sec: number): Promise<SandboxRecord> {
    const target = new Date(this.#r.now().getTime() + sec * 1000);
    if (target <= endAtOf(rec)) return rec;
    return (await this.#r.repo.update(rec.id, { endAt: target })) ?? rec;
  }

  /**
   * E2B pause = suspend: running → suspending → (node: memory checkpoint + disk snapshot,
   * node freed) → suspended, answered as soon as the capture is safe on the node; the
   * snapshot is `local` (restores pinned to that node) until its parts, published behind
   * the answer (uploaded and checksummed), make it `durable`. A node lost before that
   * leaves the sandbox paused with a `local` snapshot: its restore is refused, naming that,
   * until the node returns (never restored from anything else). The snapshot row (one per
   * attempt) is restorable only once the node answered with its descriptor. A failure
   * leaves the sandbox running (the node thaws it; if the node already let it go, it is
   * restored from the node's local copy), never half. `upload: false` (warm-pool members)
   * keeps the parts on the node only: the restore is pinned there. `kind: "disk"` (E2B's
   * filesystem-only pause) keeps no memory: the restore boots the sandbox fresh from its disk.
   */
  async suspend(tenantId: TenantId, id: string, opts: { upload?: boolean; kind?: SnapshotKind } = {}): Promise<SandboxRecord> {
    const rec = await liveSandbox(this.#r, tenantId, id);
    if (pausedStates.includes(rec.state)) throw new SpaceError("failed_precondition", `sandbox ${id} is already paused`);
    if (rec.state !== "running" || !rec.nodeId) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; only a running sandbox can be paused`, { retryable: true });
    }
    return this.suspendRecord(rec, opts);
  }

  async suspendRecord(rec: SandboxRecord, { upload = true, kind = "full" }: { upload?: boolean; kind?: SnapshotKind } = {}): Promise<SandboxRecord> {
    await refuseWithVolumes(this.#r, rec.id, "pause");
    const ref: SandboxRef = { sandboxId: rec.id, nodeId: rec.nodeId! };
    const suspending = await this.#r.repo.transition(rec.id, ["running"], "suspending");
    if (!suspending) {
      const now = await this.#r.repo.getById(rec.id);
      if (now && pausedStates.includes(now.state)) throw new SpaceError("failed_precondition", `sandbox ${rec.id} is already paused`);
      if (!now || !isLive(now.state)) throw notFound(`sandbox ${rec.id} not found`);
      throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state (now ${now.state}); retry`, { retryable: true });
    }
    // Routing stops: no new envd stream may start on a sandbox being checkpointed.
    this.#r.events.emit("ended", rec.id);
    const snapshotId = await this.#r.snapshots.begin({ sandboxId: rec.id, executionId: null, nodeId: ref.nodeId, purpose: "suspend", kind });
    let desc: SnapshotDescriptor;
    try {
      desc = await this.#r.substrate.suspend(ref, { snapshotId, upload: false, kind }, AbortSignal.timeout(SNAPSHOT_CALL_MS));
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#r.log.warn({ sandboxId: rec.id, snapshotId, code: err.code, err: e }, "suspend failed");
      await this.#r.snapshots.fail(snapshotId, `${err.code}: ${err.message}`).catch(() => undefined);
      await this.#recoverSuspend(rec, ref, snapshotId, kind);
      throw err;
    }
    await this.#r.snapshots.finish(snapshotId, desc);
    const suspended = await this.#r.repo.transition(rec.id, ["suspending"], "suspended", { address: null });
    if (!suspended) {
      // Killed while it was being suspended: the snapshot has no owner.
      await dropSnapshots(this.#r, rec.id, { snapshotId });
      throw notFound(`sandbox ${rec.id} was killed while it was being paused`);
    }
    // Earlier suspend snapshots are superseded (no restore can use them: it is suspended now).
    await dropSnapshots(this.#r, rec.id, { purpose: "suspend", except: snapshotId });
    if (upload) void this.publishLocal(rec.id, ref.nodeId, snapshotId);
    return suspended;
  }

  /**
   * The node puts the parts in the blob store; then the snapshot is `durable` (true). A
   * failure leaves it `local` (logged; false). One publication per snapshot in this
   * process: a second call joins the first. Besides the pause itself, the controller calls
   * it for snapshots a lost process left `local` (controller/snapshot-publication.ts).
   */
  publishLocal(sandboxId: string, nodeId: string, snapshotId: string): Promise<boolean> {
    const inflight = this.#publishing.get(snapshotId);
    if (inflight) return inflight;
    const t0 = performance.now();
    const p = (async () => {
      try {
        const desc = await this.#r.substrate.publishSnapshot(nodeId, snapshotId, AbortSignal.timeout(SNAPSHOT_CALL_MS));
        const snap = await this.#r.snapshots.published(snapshotId, desc);
        this.#r.log.info({ sandboxId, snapshotId, ms: Math.round(performance.now() - t0), recorded: snap !== null }, "snapshot durable (published behind the pause)");
        return snap !== null;
      } catch (e: unknown) {
        const err = SpaceError.from(e);
        this.#r.log.warn({ sandboxId, snapshotId, nodeId, code: err.code, err: e }, "a paused sandbox's snapshot could not be published: it stays local to its node");
        return false;
      }
    })().finally(() => this.#publishing.delete(snapshotId));
    this.#publishing.set(snapshotId, p);
    return p;
  }

  /**
   * The sandbox's newest suspend snapshot once a publication of it settled: `durable`, or
   * still `local` when its node could not publish it. What a restore that cannot run on the
   * snapshot's node waits for. With `publish`, a `local` one is published now; the
   * publication is joined, not repeated: one in flight in this process is awaited, and the
   * node shares its upload with one another process (the replica that paused, the
   * controller) started, so a connect through any replica waits for the same upload.
   * Without, only a publication in flight in this process is awaited.
   */
  async settledSnapshot(sandboxId: string, publish: boolean): Promise<Snapshot | null> {
    const snap = await this.#r.snapshots.latest(sandboxId, "suspend");
    if (snap?.state !== "local" || !snap.nodeId) return snap;
    const inflight = this.#publishing.get(snap.id);
    if (inflight) await inflight;
    else if (publish) await this.publishLocal(sandboxId, snap.nodeId, snap.id);
    else return snap;
    return this.#r.snapshots.latest(sandboxId, "suspend");
  }

  /** After a failed suspend: back to running where the node still runs it, else restored from the node's local copy, else failed. */
  async #recoverSuspend(rec: SandboxRecord, ref: SandboxRef, snapshotId: string, kind: SnapshotKind): Promise<void> {
    try {
      const seen = await this.#r.substrate.observe(ref, AbortSignal.timeout(30_000));
      if (seen && seen.state === "running") {
        await this.#r.repo.transition(rec.id, ["suspending"], "running", { address: seen.address });
        return;
      }
      if (!seen) {
        const local: SnapshotDescriptor = {
          snapshotId, sourceSandboxId: rec.id, template: rec.templateId ?? "", kind, parentUuid: "", parts: [], sizeBytes: 0, timings: {},
        };
        const executionId = newExecutionId();
        const st = await restoreHeld(this.#r, ref, local, specOf(rec, executionId), AbortSignal.timeout(SNAPSHOT_CALL_MS));
        await this.#r.snapshots.newExecution(rec.id, executionId);
        await this.#r.repo.transition(rec.id, ["suspending"], "running", { address: st.address });
        return;
      }
      throw new SpaceError("internal", `the node reports the sandbox ${seen.state}`);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#r.log.error({ sandboxId: rec.id, err: e }, "suspend failed and the sandbox could not be brought back");
      await this.#r.repo.transition(rec.id, ["suspending"], "failed", { failureMessage: `suspend failed and recovery failed: ${err.code}: ${err.message}` });
    }
  }


  /**
   * E2B connect/resume: running → extend the end time only (resumed=false);
   * resident-paused → resume on its node; suspended → restore (resumed=true). Concurrent
   * connects converge on one restore: one caller wins suspended → resuming, the others
   * wait for it to be running. A connect during a pause waits for the pause, then restores.
   * `memory: false` (E2B's connect option, SDK `onResume: "reboot"`) restores a suspended
   * sandbox's disk only: it boots fresh, the snapshot's memory is left as it is.
   * `pinned` (a warm member's adoption) restores a `local` snapshot on its node or not at
   * all: publishing it to restore elsewhere would take longer than the cold create the
   * adopter falls back to.
   */
  async connect(tenantId: TenantId, id: string, timeoutSec: number | undefined, opts: ConnectOptions = {}): Promise<ConnectResult> {
    if (timeoutSec !== undefined) validateTimeout(timeoutSec);
    const rec = await liveSandbox(this.#r, tenantId, id);
    switch (rec.state) {
      case "running":
      case "creating":
        return { sandbox: timeoutSec === undefined ? rec : await this.extend(rec, timeoutSec), resumed: false };
      case "paused": {
        if (!rec.nodeId) throw new SpaceError("internal", `paused sandbox ${id} has no node`);
        const nodeId = rec.nodeId;
        const start = performance.now();
        const resumed = await inSpan("sandboxes.resume", "sandboxes", { "space.sandbox.id": rec.id, "space.resume.path": "resident" }, async () => {
          await this.#r.substrate.resume({ sandboxId: rec.id, nodeId }, AbortSignal.timeout(120_000));
          return this.#r.repo.transition(rec.id, ["paused"], "running");
        });
        if (!resumed) throw new SpaceError("aborted", `sandbox ${id} changed state during resume; retry`);
        this.#r.metrics.resumeSeconds.observe({ path: "resident" }, secondsSince(start));
        return { sandbox: await this.extend(resumed, timeoutSec ?? 300), resumed: true };
      }
      case "suspending": {
        const settled = await this.#awaitSettled(rec.id, ["suspending"]);
        if (settled.state === "running") return { sandbox: await this.extend(settled, timeoutSec ?? 300), resumed: false };
        return this.connect(tenantId, id, timeoutSec, opts);
      }
      case "suspended":
      case "resuming": {
        const start = performance.now();
        const running = await inSpan("sandboxes.resume", "sandboxes", { "space.sandbox.id": rec.id, "space.resume.path": "restore" }, () =>
          this.#restore(rec, { ...(opts.memory === false ? { kind: "disk" as const } : {}), pinned: opts.pinned === true }),
        );
        this.#r.metrics.resumeSeconds.observe({ path: "restore" }, secondsSince(start));
        return { sandbox: await this.extend(running, timeoutSec ?? 300), resumed: true };
      }
      default:
        throw new SpaceError("failed_precondition", `sandbox ${id} is ${rec.state}; connect again shortly`, { retryable: true });
    }
  }

  /** One restore per sandbox in this process; across processes the guarded transition decides. */
  #restore(rec: SandboxRecord, opts: { kind?: SnapshotKind; pinned: boolean }): Promise<SandboxRecord> {
    const inflight = this.#restores.get(rec.id);
    if (inflight) return inflight;
    const p = (async () => {
      if (rec.state === "suspended") {
        const claimed = await this.#r.repo.transition(rec.id, ["suspended"], "resuming");
        if (claimed) return this.restoreClaimed(claimed, opts);
      }
      // Another process restores it: wait for the outcome.
      const settled = await this.#awaitSettled(rec.id, ["resuming"]);
      if (settled.state === "running") return settled;
      throw new SpaceError("unavailable", `sandbox ${rec.id} could not be resumed (a concurrent resume left it ${toPublicState(settled.state)}); retry`, { retryable: true });
    })().finally(() => this.#restores.delete(rec.id));
    this.#restores.set(rec.id, p);
    return p;
  }

  /**
   * `kind: "disk"` restores the snapshot's disk only (a fresh boot), whatever it holds.
   * `pinned`: a `local` snapshot is never published here to restore elsewhere.
   */
  async restoreClaimed(rec: SandboxRecord, opts: { avoidNodeId?: string; kind?: SnapshotKind; pinned?: boolean } = {}): Promise<SandboxRecord> {
    const signal = AbortSignal.timeout(SNAPSHOT_CALL_MS);
    const snap = await this.#r.snapshots.latest(rec.id, "suspend");
    if (!snap?.descriptor) {
      await this.#r.repo.transition(rec.id, ["resuming"], "failed", { failureMessage: "no restorable snapshot" });
      throw new SpaceError("internal", `sandbox ${rec.id} is paused but has no restorable snapshot`);
    }
    const executionId = newExecutionId();
    const spec = specOf(rec, executionId);
    const descOf = (s: Snapshot) => (opts.kind === "disk" ? { ...s.descriptor!, kind: opts.kind } : s.descriptor!);
    const place = async (s: Snapshot): Promise<SandboxRef> => {
      const placed = await placeFor(this.#r, rec, s, signal);
      // Nothing was started there: the sandbox id must not be touched on the drained node.
      if (opts.avoidNodeId !== undefined && placed.nodeId === opts.avoidNodeId) throw new SpaceError("failed_precondition", `placement chose node ${placed.nodeId}, the node being evacuated`);
      return placed;
    };
    // Declared wide: assigned inside the nested try, so the outer catch must not narrow it to null.
    let ref = null as SandboxRef | null;
    let status: SandboxStatus;
    try {
      try {
        ref = await place(snap);
        status = await restoreHeld(this.#r, ref, descOf(snap), spec, signal);
      } catch (e: unknown) {
        // A `local` snapshot restores on its node only: when that cannot, wait for its
        // publication (in flight behind the pause) and restore anywhere; else say why.
        if (snap.state === "durable") throw e;
        if (ref) await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
        ref = null;
        // A refusal of the pinned node itself (the environment gate's drain hint) says more
        // than "not durable", and what to do: that refusal publishes nothing on its own.
        const refusedByGate = e instanceof SpaceError && e.code === "failed_precondition";
        const settled = await this.settledSnapshot(rec.id, !refusedByGate && opts.pinned !== true);
        if (settled?.id !== snap.id || settled.state !== "durable") throw refusedByGate ? e : notDurable(rec.id, snap, e);
        ref = await place(settled);
        status = await restoreHeld(this.#r, ref, descOf(settled), spec, signal);
      }
      await this.#r.snapshots.newExecution(rec.id, executionId);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#r.log.warn({ sandboxId: rec.id, snapshotId: snap.id, nodeId: ref?.nodeId, code: err.code, err: e }, "restore failed; the sandbox stays paused");
      if (ref) await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
      await this.#r.repo.transition(rec.id, ["resuming"], "suspended");
      throw err;
    }
    const running = await this.#r.repo.transition(rec.id, ["resuming"], "running", { nodeId: ref.nodeId as NodeId, address: status.address });
    if (!running) {
      await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
      throw notFound(`sandbox ${rec.id} was killed while it was being resumed`);
    }
    return running;
  }

  /**
   * Forced drain of `fromNodeId`: moves one resident elsewhere keeping its id, disk and
   * memory. running (a resident-paused one is resumed first) → suspend with the parts
   * published to the blob store → the snapshot must be `durable` (a node-local snapshot
   * would pin the restore to the draining node) → restored on another node (placement
   * already excludes the draining node; a placement landing there anyway is refused).
   * Any failure leaves it where it was, running, and the outcome says why. Never throws.

  /**
   * Waits until the sandbox leaves `states` (woken by any change of the row, see
   * changes.ts); not found when it ended.
   */
  async #awaitSettled(id: SandboxId, states: readonly SandboxState[], timeoutMs = SNAPSHOT_CALL_MS): Promise<SandboxRecord> {
    const deadline = Date.now() + timeoutMs;
    const now = await this.#r.changes.awaitLeaving(id, states, () => this.#r.repo.getById(id), deadline, this.#r.pollMs);
    if (!now || !isLive(now.state)) throw notFound(`sandbox ${id} not found`);
    if (states.includes(now.state)) throw new SpaceError("deadline_exceeded", `sandbox ${id} is still ${now.state}; retry`, { retryable: true });
    return now;
  }
}

/** A restore of a `local` snapshot whose node could not run it, named as such (the sandbox stays paused). */
function notDurable(sandboxId: string, snap: Snapshot, cause: unknown): SpaceError {
  const err = SpaceError.from(cause);
  return new SpaceError(
    "unavailable",
    `sandbox ${sandboxId} is paused and its snapshot ${snap.id} is local to node ${snap.nodeId ?? "?"} (not durable: its parts never reached the blob store); ` +
      `it can only be resumed there, and that failed (${err.code}: ${publicMessage(err)}); it stays paused and resumes when the node is back`,
    { retryable: true, details: { sandboxId, snapshotId: snap.id, durability: "local", nodeId: snap.nodeId } },
  );
}
