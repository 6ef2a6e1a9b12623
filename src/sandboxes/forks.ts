/**
 * Forks and named snapshots: a capture of a running sandbox (it keeps running)
 * restored into new sandboxes (E2B fork), or kept under a name until deleted (E2B
 * snapshot create) and later started as a new sandbox (`Sandbox.create(snapshotName)`).
 */
import { SpaceError, invalid, notFound, publicMessage } from "../core/errors.ts";
import { newExecutionId, newSandboxId, type NodeId, type SandboxId, type TenantId } from "../core/ids.ts";
import type { SandboxRef, SandboxStatus } from "../substrate/substrate.ts";
import { validateTimeout, type CreateInput } from "./create-input.ts";
import type { SandboxRecord } from "./model.ts";
import { RESTORE_AS_MAX } from "../contract/snapshot-descriptor.ts";
import { dropSnapshots, liveSandbox, placeFor, refuseWithVolumes, restoreHeld, SNAPSHOT_CALL_MS, specOf, toPublicState, type SandboxResources } from "./resources.ts";
import type { Snapshot } from "./snapshot-repo.ts";

/** One requested fork: the new sandbox, or why it did not start. */
export type ForkOutcome = { sandbox: SandboxRecord; error?: undefined } | { sandbox?: undefined; error: SpaceError };

/** Upper bound of forks per request: as many as one capture prepares restores for. */
export const MAX_FORKS = RESTORE_AS_MAX;

export class SandboxForks {
  readonly #r: SandboxResources;

  constructor(r: SandboxResources) {
    this.#r = r;
  }

  /**
   * E2B fork: one capture of a running sandbox (it keeps running, id and end time
   * untouched), kept on its node (`local`: no upload before the forks start), then `count`
   * new sandboxes restored from it there, each succeeding or failing on its own; a fork
   * that node cannot take has the capture published once (durable) and is placed anywhere.
   * The capture is freed afterwards.
   */
  async fork(tenantId: TenantId, id: string, input: { count?: number; timeoutSec?: number; metadata?: Record<string, string> }): Promise<ForkOutcome[]> {
    const count = input.count ?? 1;
    if (!Number.isInteger(count) || count < 1 || count > MAX_FORKS) throw invalid(`count=${count} must be between 1 and ${MAX_FORKS}`, { field: "count" });
    const timeoutSec = input.timeoutSec ?? 300;
    validateTimeout(timeoutSec);
    const rec = await liveSandbox(this.#r, tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) throw new SpaceError("failed_precondition", `sandbox ${id} is ${toPublicState(rec.state)}; only a running sandbox can be forked`);
    await refuseWithVolumes(this.#r, rec.id, "fork");
    // Over quota: refused before the capture (no node work); each fork's insert admits for real.
    await this.#r.repo.checkQuota?.(tenantId, rec);
    const snapshotId = await this.#r.snapshots.begin({ sandboxId: rec.id, executionId: null, nodeId: rec.nodeId, purpose: "fork" });
    // Named now: the node sets up each fork's disk and network while it dumps the memory.
    const ids = Array.from({ length: count }, () => newSandboxId());
    let snap: Snapshot;
    try {
      const desc = await this.#r.substrate.capture(
        { sandboxId: rec.id, nodeId: rec.nodeId },
        { snapshotId, upload: false, restoreAs: ids },
        AbortSignal.timeout(SNAPSHOT_CALL_MS),
      );
      snap = await this.#r.snapshots.finish(snapshotId, desc);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      await this.#r.snapshots.fail(snapshotId, `${err.code}: ${err.message}`).catch(() => undefined);
      throw err;
    }
    // Published at most once, and only when a fork cannot run on the capture's node.
    let publication: Promise<Snapshot> | undefined;
    const durable = () => (publication ??= this.#publish(snap));
    try {
      return await Promise.all(
        ids.map((forkId) =>
          this.#forkOne(forkId, input.metadata ? { ...rec, metadata: input.metadata } : rec, snap, timeoutSec, durable).then(
            (sandbox): ForkOutcome => ({ sandbox }),
            (e: unknown): ForkOutcome => ({ error: SpaceError.from(e) }),
          ),
        ),
      );
    } finally {
      await dropSnapshots(this.#r, rec.id, { snapshotId });
    }
  }

  /**
   * E2B snapshot create: a capture of a running sandbox (it keeps running) made
   * durable in the blob store and kept under its name until deleted; it outlives its
   * source. 409 when the tenant already has a snapshot of that name.
   */
  async createNamedSnapshot(tenantId: TenantId, id: string, name?: string): Promise<Snapshot> {
    if (name !== undefined && (name.length < 1 || name.length > 128)) throw invalid(`name must be 1-128 characters`, { field: "name" });
    const rec = await liveSandbox(this.#r, tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) {
      throw new SpaceError("failed_precondition", `sandbox ${id} is ${toPublicState(rec.state)}; only a running sandbox can be snapshotted`);
    }
    await refuseWithVolumes(this.#r, rec.id, "a snapshot");
    if (name !== undefined && (await this.#r.snapshots.listNamed({ tenantId, name, limit: 1 })).length) {
      throw new SpaceError("already_exists", `a snapshot named '${name}' already exists`, { details: { field: "name" } });
    }
    const snapshotId = await this.#r.snapshots.begin({
      sandboxId: rec.id,
      executionId: null,
      nodeId: rec.nodeId,
      purpose: "named",
      tenantId,
      ...(name !== undefined ? { name } : {}),
    });
    try {
      const desc = await this.#r.substrate.capture({ sandboxId: rec.id, nodeId: rec.nodeId }, { snapshotId, upload: true }, AbortSignal.timeout(SNAPSHOT_CALL_MS));
      const snap = await this.#r.snapshots.finish(snapshotId, desc);
      this.#r.log.info({ sandboxId: rec.id, snapshotId, name, state: snap.state }, "named snapshot taken");
      return snap;
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      await this.#r.snapshots.fail(snapshotId, `${err.code}: ${err.message}`).catch(() => undefined);
      throw err;
    }
  }

  /** The tenant's named snapshots (filters, keyset page of `limit`); `nextToken` when more may follow. */
  async listNamedSnapshots(
    tenantId: TenantId,
    q: { sandboxId?: string; name?: string; limit: number; nextToken?: string },
  ): Promise<{ items: Snapshot[]; nextToken: string | null }> {
    const rows = await this.#r.snapshots.listNamed({
      tenantId,
      limit: q.limit + 1,
      ...(q.sandboxId ? { sandboxId: q.sandboxId } : {}),
      ...(q.name ? { name: q.name } : {}),
      ...(q.nextToken ? { after: q.nextToken } : {}),
    });
    const items = rows.slice(0, q.limit);
    return { items, nextToken: rows.length > q.limit ? items[items.length - 1]!.id : null };
  }

  /**
   * Deletes a named snapshot of the tenant: the row is marked deleted and the node's local
   * copy freed (best effort); returns the row (its parts, for the caller to drop from the
   * blob store). Not found for another tenant's, unknown or already deleted ones.
   */
  async deleteNamedSnapshot(tenantId: TenantId, snapshotId: string): Promise<Snapshot> {
    const snap = await this.#r.snapshots.findNamed(tenantId, snapshotId);
    if (!snap || snap.id !== snapshotId) throw notFound(`snapshot ${snapshotId} not found`);
    const [gone] = await this.#r.snapshots.markDeleted(snap.sandboxId, { snapshotId, purpose: "named" });
    if (!gone) throw notFound(`snapshot ${snapshotId} not found`);
    if (gone.nodeId) {
      await this.#r.substrate.dropSnapshot(gone.nodeId, gone.id, AbortSignal.timeout(30_000)).catch((e: unknown) =>
        this.#r.log.warn({ err: e, snapshotId }, "could not free a node's local snapshot copy"),
      );
    }
    return { ...gone, descriptor: gone.descriptor ?? snap.descriptor };
  }

  /** A new sandbox (new id) restored from a named snapshot: memory and disk; the caller's metadata and timeout. */
  async createFromSnapshot(tenantId: TenantId, snap: Snapshot, input: CreateInput): Promise<SandboxRecord> {
    validateTimeout(input.timeoutSec);
    const src = await this.#r.repo.getById(snap.sandboxId as SandboxId);
    if (!src || src.tenantId !== tenantId) throw notFound(`template '${input.template}' not found`);
    return this.#forkOne(newSandboxId(), { ...src, metadata: input.metadata }, snap, input.timeoutSec);
  }

  /** Puts a `local` capture's parts in the blob store: `durable`, restorable on any node. */
  async #publish(snap: Snapshot): Promise<Snapshot> {
    if (!snap.nodeId) throw new SpaceError("failed_precondition", `snapshot ${snap.id} has no node to publish it from`);
    const desc = await this.#r.substrate.publishSnapshot(snap.nodeId, snap.id, AbortSignal.timeout(SNAPSHOT_CALL_MS));
    const published = await this.#r.snapshots.published(snap.id, desc);
    if (!published) throw new SpaceError("failed_precondition", `snapshot ${snap.id} was deleted while it was being published`);
    return published;
  }

  /** `id`: the new sandbox's. `durable`: when given and `snap` is local, what a fork its node cannot take restores from instead (anywhere). */
  async #forkOne(id: SandboxId, src: SandboxRecord, snap: Snapshot, timeoutSec: number, durable?: () => Promise<Snapshot>): Promise<SandboxRecord> {
    const now = this.#r.now();
    const executionId = newExecutionId();
    const rec = await this.#r.repo.insert(
      {
        id,
        tenantId: src.tenantId,
        templateId: src.templateId,
        alias: src.alias,
        state: "creating",
        vcpu: src.vcpu,
        memoryMib: src.memoryMib,
        diskMib: src.diskMib,
        metadata: structuredClone(src.metadata),
        envVars: structuredClone(src.envVars),
        // The fork's envd is the source's, restored with its memory: it keeps the source's
        // access token (its /init accepts only that one), so the tokens are inherited.
        envdAccessToken: src.envdAccessToken,
        trafficAccessToken: src.trafficAccessToken,
        secure: src.envdAccessToken !== null,
        allowInternetAccess: src.allowInternetAccess,
        network: structuredClone(src.network),
        lifecycle: structuredClone(src.lifecycle),
        startedAt: now,
        endAt: new Date(now.getTime() + timeoutSec * 1000),
      },
      executionId,
    );
    let ref: SandboxRef | null = null;
    try {
      const signal = AbortSignal.timeout(SNAPSHOT_CALL_MS);
      const restore = async (s: Snapshot): Promise<{ ref: SandboxRef; status: SandboxStatus }> => {
        const placed = await placeFor(this.#r, rec, s, signal);
        ref = placed;
        if (!placed.recorded) await this.#r.repo.update(rec.id, { nodeId: placed.nodeId as NodeId });
        return { ref: placed, status: await restoreHeld(this.#r, placed, s.descriptor!, specOf(rec, executionId), signal) };
      };
      let done: { ref: SandboxRef; status: SandboxStatus };
      try {
        done = await restore(snap);
      } catch (e: unknown) {
        if (!durable || snap.state === "durable") throw e;
        if (ref) await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
        ref = null;
        this.#r.log.info({ sandboxId: rec.id, snapshotId: snap.id, err: e }, "fork: the capture's node cannot take it; publishing the capture to restore it elsewhere");
        done = await restore(await durable());
      }
      const { status } = done;
      ref = done.ref;
      const startedAt = this.#r.now();
      const running = await this.#r.repo.transition(rec.id, ["creating"], "running", {
        nodeId: ref.nodeId as NodeId,
        address: status.address,
        startedAt,
        endAt: new Date(startedAt.getTime() + timeoutSec * 1000),
      });
      if (!running) {
        await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
        throw notFound(`sandbox ${rec.id} was killed while it was being forked`);
      }
      return running;
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      if (err.code === "resource_exhausted") this.#r.log.warn({ sandboxId: rec.id, source: src.id, code: err.code, reason: err.message }, "fork refused");
      else this.#r.log.warn({ sandboxId: rec.id, source: src.id, code: err.code, err: e }, "fork failed");
      if (ref) await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch(() => undefined);
      await this.#r.repo.transition(rec.id, ["creating"], "failed", { failureMessage: `fork of ${src.id} failed: ${err.code}: ${publicMessage(err)}` });
      throw err;
    }
  }
}
