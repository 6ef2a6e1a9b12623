/**
 * The service's port for snapshot rows (src/store/snapshots.ts, one row per attempt; the
 * store's `Snapshot` is the record) and the execution bookkeeping suspend/restore need.
 * `StoreSnapshotRepo` is the store-backed implementation; `MemorySnapshotRepo` the test
 * double with the same semantics.
 *
 * A snapshot is restorable only once `finish` recorded it: `durable` when every part is
 * in the blob store (any node), `local` when the node kept it on its disk only (pinned).
 */
import { SpaceError } from "../core/errors.ts";
import { createExecution } from "../store/executions.ts";
import { findSandbox } from "../store/sandboxes.ts";
import { admitNamedSnapshot, type QuotaLimits } from "../store/tenant-quotas.ts";
import {
  createSnapshot,
  failSnapshot,
  findNamedSnapshot,
  findSnapshot,
  holdSnapshot,
  latestRestorableSnapshot,
  listNamedSnapshots,
  listRestorableSnapshots,
  liveSnapshotStates,
  markSnapshotsDeleted,
  newSnapshotId,
  releaseSnapshot,
  restorableSnapshotStates,
  updateSnapshot,
  type NamedSnapshotQuery,
  type Snapshot,
  type SnapshotDeleteFilter,
  type SnapshotPurpose,
} from "../store/snapshots.ts";
import type { Db } from "../store/db.ts";
import type { ExecutionId, NodeId } from "../core/ids.ts";
import type { SnapshotDescriptor, SnapshotKind } from "../substrate/substrate.ts";

export type { Snapshot, SnapshotPurpose };
export type NamedQuery = NamedSnapshotQuery;
export type DeleteFilter = SnapshotDeleteFilter;

export interface SnapshotRepo {
  /** A new row in `creating` for one attempt. */
  begin(input: BeginInput): Promise<string>;
  /** Records the node's descriptor: `durable` when its parts are in the blob store, else `local`. */
  finish(id: string, desc: SnapshotDescriptor): Promise<Snapshot>;
  fail(id: string, error: string): Promise<void>;
  /**
   * A `local` snapshot whose parts were published after it was recorded (a pause answered
   * before its upload): `durable`, with the published descriptor. Null when it is no longer
   * `local` (superseded, deleted or ended meanwhile).
   */
  published(id: string, desc: SnapshotDescriptor): Promise<Snapshot | null>;
  /** The newest restorable snapshot of `purpose` for a sandbox. */
  latest(sandboxId: string, purpose: SnapshotPurpose): Promise<Snapshot | null>;
  get(id: string): Promise<Snapshot | null>;
  /** Restorable snapshots of a sandbox (every purpose), newest first. */
  list(sandboxId: string): Promise<Snapshot[]>;
  /** Marks live snapshots of the sandbox deleted (all, or the one / the purpose given, minus `except`); returns them. */
  markDeleted(sandboxId: string, filter?: DeleteFilter): Promise<Snapshot[]>;
  /** The next execution attempt of a sandbox (pending until its transition to running). */
  newExecution(sandboxId: string, executionId: string): Promise<void>;
  /**
   * Restorable named snapshots of a tenant's sandboxes (the tenant of the source sandbox),
   * newest first; `after` = the id of the last row of the previous page (keyset).
   */
  listNamed(q: NamedQuery): Promise<Snapshot[]>;
  /** A restorable named snapshot of the tenant by id or, else, by name (newest); null when none. */
  findNamed(tenantId: string, idOrName: string): Promise<Snapshot | null>;
  /**
   * Holds a snapshot while a restore uses it (retention never deletes a held one) until
   * `release` or `until`; false when retention already claimed it for deletion.
   */
  hold(id: string, until: Date): Promise<boolean>;
  release(id: string): Promise<void>;
}

export interface BeginInput {
  sandboxId: string;
  executionId: string | null;
  nodeId: string;
  purpose: SnapshotPurpose;
  /** What it keeps (default `full`: memory and disk). */
  kind?: SnapshotKind;
  name?: string;
  /** The source sandbox's tenant (the store joins the sandbox row; the memory repo keeps it). */
  tenantId?: string;
}

/** Durable iff its parts (the disk, and the memory unless it is a disk snapshot) are in the blob store. */
export function isDurable(desc: SnapshotDescriptor): boolean {
  return (desc.kind === "disk" || desc.parts.some((p) => p.kind === "memory")) && desc.parts.some((p) => p.kind === "disk");
}

export class StoreSnapshotRepo implements SnapshotRepo {
  /** `quotas`: tenant quota defaults; a named snapshot is admitted against SPACE_QUOTA_SNAPSHOTS. Absent = none. */
  constructor(
    private readonly db: Db,
    private readonly quotas?: QuotaLimits,
  ) {}

  async begin(input: BeginInput): Promise<string> {
    const id = newSnapshotId();
    const row = {
      id, sandboxId: input.sandboxId, executionId: input.executionId, nodeId: input.nodeId as NodeId, kind: input.kind ?? "full", purpose: input.purpose, name: input.name ?? null,
    };
    const quotas = this.quotas;
    if (input.purpose !== "named" || !quotas) {
      await createSnapshot(this.db, row);
      return id;
    }
    await this.db.transaction(async (tx) => {
      const owner = await findSandbox(tx, input.sandboxId);
      if (owner) await admitNamedSnapshot(tx, owner.tenantId, quotas);
      await createSnapshot(tx, row);
    });
    return id;
  }

  async finish(id: string, desc: SnapshotDescriptor): Promise<Snapshot> {
    const { wrappedKey, timings: _t, ...kept } = desc;
    return updateSnapshot(
      this.db,
      id,
      { state: isDurable(desc) ? "durable" : "local", parts: desc.parts, sizeBytes: desc.sizeBytes, descriptor: { ...kept, timings: {} }, wrappedKey: wrappedKey ?? null },
      { from: ["creating"] },
    );
  }

  async published(id: string, desc: SnapshotDescriptor): Promise<Snapshot | null> {
    if (!isDurable(desc)) throw new SpaceError("internal", `snapshot ${id}: a publication without its parts`);
    const { wrappedKey, timings: _t, ...kept } = desc;
    try {
      return await updateSnapshot(
        this.db,
        id,
        { state: "durable", parts: desc.parts, sizeBytes: desc.sizeBytes, descriptor: { ...kept, timings: {} }, wrappedKey: wrappedKey ?? null },
        { from: ["local"] },
      );
    } catch (e: unknown) {
      if (e instanceof SpaceError && e.code === "failed_precondition") return null;
      throw e;
    }
  }

  fail(id: string, error: string): Promise<void> {
    return failSnapshot(this.db, id, error);
  }

  async latest(sandboxId: string, purpose: SnapshotPurpose): Promise<Snapshot | null> {
    return (await latestRestorableSnapshot(this.db, sandboxId, purpose)) ?? null;
  }

  async get(id: string): Promise<Snapshot | null> {
    return (await findSnapshot(this.db, id)) ?? null;
  }

  list(sandboxId: string): Promise<Snapshot[]> {
    return listRestorableSnapshots(this.db, sandboxId);
  }

  markDeleted(sandboxId: string, f: DeleteFilter = {}): Promise<Snapshot[]> {
    return markSnapshotsDeleted(this.db, sandboxId, f);
  }

  async newExecution(sandboxId: string, executionId: string): Promise<void> {
    await createExecution(this.db, { sandboxId, id: executionId as ExecutionId });
  }

  listNamed(q: NamedQuery): Promise<Snapshot[]> {
    return listNamedSnapshots(this.db, q);
  }

  async findNamed(tenantId: string, idOrName: string): Promise<Snapshot | null> {
    return (await findNamedSnapshot(this.db, tenantId, idOrName)) ?? null;
  }

  hold(id: string, until: Date): Promise<boolean> {
    return holdSnapshot(this.db, id, until);
  }

  release(id: string): Promise<void> {
    return releaseSnapshot(this.db, id);
  }
}

export class MemorySnapshotRepo implements SnapshotRepo {
  readonly rows = new Map<string, Snapshot>();
  readonly executions: string[] = [];
  /** Snapshot id → the source sandbox's tenant (given at begin). */
  readonly #tenants = new Map<string, string>();
  #seq = 0;

  async begin(input: BeginInput): Promise<string> {
    const id = newSnapshotId();
    if (input.tenantId) this.#tenants.set(id, input.tenantId);
    // Strictly increasing times so `latest` is deterministic within a millisecond.
    this.rows.set(id, {
      id, sandboxId: input.sandboxId, executionId: input.executionId, attempt: 1, kind: input.kind ?? "full", state: "creating", parts: [], environment: null,
      nodeId: input.nodeId as NodeId, sizeBytes: null, error: null, createdAt: new Date(Date.now() + this.#seq++), durableAt: null, deletedAt: null,
      purpose: input.purpose, name: input.name ?? null, descriptor: null,
    });
    return id;
  }
  async finish(id: string, desc: SnapshotDescriptor): Promise<Snapshot> {
    const r = this.rows.get(id);
    if (!r || r.state !== "creating") throw new Error(`snapshot ${id} is not being created`);
    r.state = isDurable(desc) ? "durable" : "local";
    r.parts = structuredClone(desc.parts);
    r.sizeBytes = desc.sizeBytes;
    r.descriptor = structuredClone(desc);
    return structuredClone(r);
  }
  async published(id: string, desc: SnapshotDescriptor): Promise<Snapshot | null> {
    const r = this.rows.get(id);
    if (!r || r.state !== "local") return null;
    r.state = "durable";
    r.parts = structuredClone(desc.parts);
    r.sizeBytes = desc.sizeBytes;
    r.descriptor = structuredClone(desc);
    r.durableAt = new Date();
    return structuredClone(r);
  }
  async fail(id: string): Promise<void> {
    const r = this.rows.get(id);
    if (r && liveSnapshotStates.includes(r.state)) r.state = "failed";
  }
  async latest(sandboxId: string, purpose: SnapshotPurpose): Promise<Snapshot | null> {
    return (await this.list(sandboxId)).find((r) => r.purpose === purpose) ?? null;
  }
  async get(id: string): Promise<Snapshot | null> {
    const r = this.rows.get(id);
    return r ? structuredClone(r) : null;
  }
  async list(sandboxId: string): Promise<Snapshot[]> {
    return [...this.rows.values()]
      .filter((r) => r.sandboxId === sandboxId && restorableSnapshotStates.includes(r.state) && r.descriptor)
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime())
      .map((r) => structuredClone(r));
  }
  async markDeleted(sandboxId: string, f: DeleteFilter = {}): Promise<Snapshot[]> {
    const out: Snapshot[] = [];
    for (const r of this.rows.values()) {
      if (r.sandboxId !== sandboxId || !liveSnapshotStates.includes(r.state)) continue;
      if ((f.snapshotId && r.id !== f.snapshotId) || (f.purpose && r.purpose !== f.purpose) || (f.except && r.id === f.except)) continue;
      r.state = "deleted";
      out.push(structuredClone(r));
    }
    return out;
  }
  async newExecution(_sandboxId: string, executionId: string): Promise<void> {
    this.executions.push(executionId);
  }
  #named(tenantId: string): Snapshot[] {
    return [...this.rows.values()]
      .filter((r) => r.purpose === "named" && this.#tenants.get(r.id) === tenantId && restorableSnapshotStates.includes(r.state) && r.descriptor)
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : -1));
  }
  async listNamed(q: NamedQuery): Promise<Snapshot[]> {
    let rows = this.#named(q.tenantId).filter((r) => (!q.sandboxId || r.sandboxId === q.sandboxId) && (!q.name || r.name === q.name));
    if (q.after) {
      const a = this.rows.get(q.after);
      if (a) rows = rows.filter((r) => r.createdAt < a.createdAt || (r.createdAt.getTime() === a.createdAt.getTime() && r.id < a.id));
    }
    return rows.slice(0, q.limit).map((r) => structuredClone(r));
  }
  async findNamed(tenantId: string, idOrName: string): Promise<Snapshot | null> {
    const rows = this.#named(tenantId);
    const r = rows.find((x) => x.id === idOrName) ?? rows.find((x) => x.name === idOrName);
    return r ? structuredClone(r) : null;
  }
  /** Snapshot id → restores holding it. */
  readonly holds = new Map<string, number>();
  async hold(id: string): Promise<boolean> {
    if (!this.rows.has(id)) return false;
    this.holds.set(id, (this.holds.get(id) ?? 0) + 1);
    return true;
  }
  async release(id: string): Promise<void> {
    const n = (this.holds.get(id) ?? 1) - 1;
    if (n > 0) this.holds.set(id, n);
    else this.holds.delete(id);
  }
}
