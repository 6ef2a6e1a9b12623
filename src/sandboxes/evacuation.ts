/**
 * Forced drain of a node: each resident moves elsewhere keeping its id, disk and memory
 * (suspend with the parts published, then restore on another node), or stays where it
 * was, running, with the reason.
 */
import { SpaceError } from "../core/errors.ts";
import { newExecutionId, type NodeId, type SandboxId } from "../core/ids.ts";
import type { SnapshotDescriptor } from "../substrate/substrate.ts";
import type { SandboxLifecycle } from "./lifecycle.ts";
import { isLive, type SandboxRecord } from "./model.ts";
import { restoreHeld, SNAPSHOT_CALL_MS, specOf, type SandboxResources } from "./resources.ts";

/**
 * One resident of a force-drained node: `moved` (restored on `toNodeId`, same id, disk
 * and memory), `stayed` (still on its node, running unless the reason says otherwise),
 * `skipped` (no longer there), `failed` (neither moved nor back; the reason says how it is left).
 */
export interface EvacuationOutcome {
  sandboxId: string;
  outcome: "moved" | "stayed" | "skipped" | "failed";
  toNodeId?: string;
  snapshotId?: string;
  reason?: string;
  durationMs: number;
}

export class SandboxEvacuation {
  readonly #r: SandboxResources;
  readonly #lifecycle: SandboxLifecycle;

  constructor(r: SandboxResources, lifecycle: SandboxLifecycle) {
    this.#r = r;
    this.#lifecycle = lifecycle;
  }

  /**
   * Forced drain of `fromNodeId`: moves one resident elsewhere keeping its id, disk and
   * memory. running (a resident-paused one is resumed first) → suspend with the parts
   * published to the blob store → the snapshot must be `durable` (a node-local snapshot
   * would pin the restore to the draining node) → restored on another node (placement
   * already excludes the draining node; a placement landing there anyway is refused).
   * Any failure leaves it where it was, running, and the outcome says why. Never throws.
   */
  async evacuate(id: SandboxId, fromNodeId: string): Promise<EvacuationOutcome> {
    const t0 = Date.now();
    const out = (o: Omit<EvacuationOutcome, "sandboxId" | "durationMs">): EvacuationOutcome => ({ sandboxId: id, ...o, durationMs: Date.now() - t0 });
    let rec = await this.#r.repo.getById(id);
    if (!rec || !isLive(rec.state) || rec.nodeId !== fromNodeId) return out({ outcome: "skipped", reason: "no longer on the node" });
    const mounts = this.#r.volumes ? await this.#r.volumes.mountsOf(rec.id) : [];
    if (mounts.length) return out({ outcome: "stayed", reason: `it mounts volume ${mounts.map((m) => m.name).join(", ")}, which stays with it on this node; kill it and the volume moves` });
    try {
      if (rec.state === "paused") {
        await this.#r.substrate.resume({ sandboxId: rec.id, nodeId: fromNodeId }, AbortSignal.timeout(120_000));
        const resumed = await this.#r.repo.transition(rec.id, ["paused"], "running");
        if (!resumed) return out({ outcome: "stayed", reason: "changed state while it was being resumed for the move" });
        rec = resumed;
      }
      if (rec.state !== "running") return out({ outcome: "stayed", reason: `sandbox is ${rec.state}; only running or paused sandboxes are moved` });
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      return out({ outcome: "stayed", reason: `resume before the move failed: ${err.code}: ${err.message}` });
    }
    let suspended: SandboxRecord;
    try {
      suspended = await this.#lifecycle.suspendRecord(rec);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      return out({ outcome: "stayed", reason: `suspend failed (the sandbox was brought back on its node): ${err.code}: ${err.message}` });
    }
    // The pause answers before its publication: a move elsewhere waits for it (durable, or it failed).
    const snap = await this.#lifecycle.settledSnapshot(rec.id, true);
    if (!snap?.descriptor) return out({ outcome: "failed", reason: "suspended but no restorable snapshot was recorded" });
    if (snap.state !== "durable") {
      const back = await this.#restoreOn(suspended, fromNodeId, snap.descriptor);
      return out({
        outcome: "stayed",
        reason: `the snapshot is not durable (its parts are only on the node's disk, not in the blob store), so it cannot be restored elsewhere${back ? `; ${back}` : ""}`,
      });
    }
    try {
      const claimed = await this.#r.repo.transition(rec.id, ["suspended"], "resuming");
      if (!claimed) return out({ outcome: "stayed", reason: "changed state after the suspend (a concurrent resume or kill)" });
      const running = await this.#lifecycle.restoreClaimed(claimed, { avoidNodeId: fromNodeId });
      this.#r.log.info({ sandboxId: rec.id, from: fromNodeId, to: running.nodeId, snapshotId: snap.id, ms: Date.now() - t0 }, "sandbox evacuated");
      return out({ outcome: "moved", toNodeId: running.nodeId!, snapshotId: snap.id });
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      const back = await this.#restoreOn(suspended, fromNodeId, snap.descriptor);
      return out({ outcome: "stayed", reason: `restore on another node failed: ${err.code}: ${err.message}${back ? `; ${back}` : ""}`, snapshotId: snap.id });
    }
  }

  /** Restores a suspended sandbox on a given node without placement (evacuation put-back); null when it runs again, else why not. */
  async #restoreOn(rec: SandboxRecord, nodeId: string, desc: SnapshotDescriptor): Promise<string | null> {
    const claimed = await this.#r.repo.transition(rec.id, ["suspended"], "resuming");
    if (!claimed) return "it changed state meanwhile and was left as it is";
    const executionId = newExecutionId();
    try {
      const st = await restoreHeld(this.#r, { sandboxId: rec.id, nodeId }, desc, specOf(claimed, executionId), AbortSignal.timeout(SNAPSHOT_CALL_MS));
      await this.#r.snapshots.newExecution(rec.id, executionId);
      const running = await this.#r.repo.transition(rec.id, ["resuming"], "running", { nodeId: nodeId as NodeId, address: st.address });
      return running ? null : "it was killed meanwhile";
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      this.#r.log.error({ sandboxId: rec.id, nodeId, err: e }, "evacuation: could not put the sandbox back on its node; it stays paused");
      await this.#r.repo.transition(rec.id, ["resuming"], "suspended");
      return `putting it back on its node failed too (${err.code}: ${err.message}); it stays paused and resumes on connect`;
    }
  }
}
