/** What happens to a sandbox past its end time (called by the timeout enforcer, src/controller/timeouts.ts). */
import { SpaceError } from "../core/errors.ts";
import type { SandboxLifecycle } from "./lifecycle.ts";
import { endAtOf, isLive, type SandboxRecord, type SandboxState } from "./model.ts";
import type { SandboxResources } from "./resources.ts";

/** States a timeout leaves alone: the sandbox holds no node, or is on its way to holding none. */
const suspendStates: readonly SandboxState[] = ["suspending", "suspended", "resuming"];

export class SandboxExpiry {
  readonly #r: SandboxResources;
  readonly #lifecycle: SandboxLifecycle;

  constructor(r: SandboxResources, lifecycle: SandboxLifecycle) {
    this.#r = r;
    this.#lifecycle = lifecycle;
  }

  /**
   * Called by the timeout enforcer for a sandbox past its end time. `kill` kills;
   * `pause` suspends a running sandbox (a suspended one does not time out), keeping what
   * its `pauseKind` says (E2B `autoPauseMemory: false`: the disk only). If that
   * suspend fails the sandbox is killed and the reason says so (keeping it running past
   * its end time would leak the node).
   */
  async expire(rec: SandboxRecord): Promise<void> {
    const fresh = await this.#r.repo.getById(rec.id);
    if (!fresh || !isLive(fresh.state) || endAtOf(fresh).getTime() > this.#r.now().getTime()) return;
    if (fresh.state === "creating") return; // create owns it; its end time starts at running
    if (suspendStates.includes(fresh.state)) return;
    if (fresh.lifecycle.onTimeout === "pause" && fresh.state === "running" && fresh.nodeId) {
      try {
        await this.#lifecycle.suspendRecord(fresh, { kind: fresh.lifecycle.pauseKind ?? "full" });
        return;
      } catch (e: unknown) {
        const err = SpaceError.from(e);
        const now = await this.#r.repo.getById(rec.id);
        if (!now || !isLive(now.state) || now.state !== "running") return;
        await this.#lifecycle.killRecord(now, `timeout: onTimeout=pause but suspend failed (${err.code}: ${err.message}); killed`);
        return;
      }
    }
    await this.#lifecycle.killRecord(fresh, "timeout");
  }
}
