/**
 * The verbs that keep a sandbox on its node: resident pause (frozen in memory; ECW
 * pause is suspend, lifecycle.ts), stop (processes end, rootfs kept, network slot freed)
 * and start (boot the kept rootfs again). The node first, then the guarded transition;
 * a lost transition (killed meanwhile) is a conflict. The caller (operations/) has read
 * the record and decided the step applies, re-claims included.
 */
import { SpaceError } from "../core/errors.ts";
import { endAtOf, type SandboxRecord } from "./model.ts";
import type { SandboxResources } from "./resources.ts";

/** A started sandbox's end time is at least this far away. */
const START_MIN_LIFETIME_MS = 300_000;

export class SandboxResidency {
  readonly #r: SandboxResources;

  constructor(r: SandboxResources) {
    this.#r = r;
  }

  /** running → paused, frozen on its node. */
  async pause(rec: SandboxRecord & { nodeId: string }, signal: AbortSignal): Promise<SandboxRecord> {
    // Stop routing first: no new envd stream should start on a freezing sandbox.
    this.#r.events.emit("ended", rec.id);
    await this.#r.substrate.pause({ sandboxId: rec.id, nodeId: rec.nodeId }, signal);
    const paused = await this.#r.repo.transition(rec.id, ["running"], "paused");
    if (!paused) {
      const now = await this.#r.repo.getById(rec.id);
      throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state during pause (now ${now?.state ?? "gone"})`);
    }
    return paused;
  }

  /** running → stopping → (node stop) → stopped; a node failure leaves it `failed`. A re-claim passes one already `stopping`. */
  async stop(rec: SandboxRecord & { nodeId: string }, signal: AbortSignal): Promise<SandboxRecord> {
    if (rec.state === "running" && !(await this.#r.repo.transition(rec.id, ["running"], "stopping"))) {
      throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state before stop`);
    }
    this.#r.events.emit("ended", rec.id);
    try {
      await this.#r.substrate.stop({ sandboxId: rec.id, nodeId: rec.nodeId }, signal);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      await this.#r.repo.transition(rec.id, ["stopping"], "failed", { failureMessage: `stop failed: ${err.code}: ${err.message}` });
      throw err;
    }
    const stopped = await this.#r.repo.transition(rec.id, ["stopping"], "stopped", { address: null });
    if (!stopped) throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state during stop`);
    return stopped;
  }

  /**
   * stopped → resuming → running on its node (new address; the end time is at least
   * 5 min away); a failed boot goes back to stopped. A re-claim passes one already `resuming`.
   */
  async start(rec: SandboxRecord & { nodeId: string }, signal: AbortSignal): Promise<SandboxRecord> {
    if (rec.state === "stopped" && !(await this.#r.repo.transition(rec.id, ["stopped"], "resuming"))) {
      throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state before start`);
    }
    let status;
    try {
      status = await this.#r.substrate.restart({ sandboxId: rec.id, nodeId: rec.nodeId }, signal);
    } catch (e: unknown) {
      await this.#r.repo.transition(rec.id, ["resuming"], "stopped");
      throw SpaceError.from(e);
    }
    const now = new Date();
    const minEnd = new Date(now.getTime() + START_MIN_LIFETIME_MS);
    const running = await this.#r.repo.transition(rec.id, ["resuming"], "running", {
      address: status.address,
      startedAt: now,
      endAt: endAtOf(rec) > minEnd ? endAtOf(rec) : minEnd,
    });
    if (!running) throw new SpaceError("failed_precondition", `sandbox ${rec.id} changed state during start`);
    return running;
  }
}
