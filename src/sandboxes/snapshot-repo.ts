/**
 * The service's port for snapshot rows (src/store/snapshots.ts, one row per attempt) and
 * the execution bookkeeping suspend/restore need. `StoreSnapshotRepo` is the store-backed
 * implementation; `MemorySnapshotRepo` the test double with the same semantics.
 *
 * A snapshot is restorable only once `finish` recorded it: `durable` when every part is
 * in the blob store (any node), `local` when the node kept it on its disk only (pinned).
 */
import { createExecution } from "../store/executions.ts";
import { createSnapshot, holdSnapshot, newSnapshotId, releaseSnapshot, updateSnapshot, type SnapshotState } from "../store/snapshots.ts";
import type { Db } from "../store/db.ts";
import type { ExecutionId, NodeId } from "../core/ids.ts";
import type { SnapshotDescriptor } from "../substrate/substrate.ts";
import { json } from "../store/sql.ts";

export type SnapshotPurpose = "suspend" | "fork" | "named";

export interface SnapshotRow {
  id: string;
  sandboxId: string;
  nodeId: string | null;
  state: SnapshotState;
  purpose: SnapshotPurpose;
  name: string | null;
  createdAt: Date;
  /** Present once finished (what restore hands back to a node). */
  descriptor: SnapshotDescriptor | null;
}

export interface SnapshotRepo {
  /** A new row in `creating` for one attempt. */
  begin(input: BeginInput): Promise<string>;
  /** Records the node's descriptor: `durable` when its parts are in the blob store, else `local`. */
  finish(id: string, desc: SnapshotDescriptor): Promise<SnapshotRow>;
  fail(id: string, error: string): Promise<void>;
  /** The newest restorable snapshot of `purpose` for a sandbox. */
  latest(sandboxId: string, purpose: SnapshotPurpose): Promise<SnapshotRow | null>;
  get(id: string): Promise<SnapshotRow | null>;
  /** Restorable snapshots of a sandbox (every purpose), newest first. */
  list(sandboxId: string): Promise<SnapshotRow[]>;
  /** Marks live snapshots of the sandbox deleted (all, or the one / the purpose given, minus `except`); returns them. */
  markDeleted(sandboxId: string, filter?: DeleteFilter): Promise<SnapshotRow[]>;
  /** The next execution attempt of a sandbox (pending until its transition to running). */
  newExecution(sandboxId: string, executionId: string): Promise<void>;
  /**
   * Restorable named snapshots of a tenant's sandboxes (the tenant of the source sandbox),
   * newest first; `after` = the id of the last row of the previous page (keyset).
   */
  listNamed(q: NamedQuery): Promise<SnapshotRow[]>;
  /** A restorable named snapshot of the tenant by id or, else, by name (newest); null when none. */
  findNamed(tenantId: string, idOrName: string): Promise<SnapshotRow | null>;
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
  name?: string;
  /** The source sandbox's tenant (the store joins the sandbox row; the memory repo keeps it). */
  tenantId?: string;
}

export interface NamedQuery {
  tenantId: string;
  sandboxId?: string;
  name?: string;
  limit: number;
  after?: string;
}

export interface DeleteFilter {
  snapshotId?: string;
  purpose?: SnapshotPurpose;
  except?: string;
}

/** Durable iff both parts (memory and disk) are in the blob store. */
export function isDurable(desc: SnapshotDescriptor): boolean {
  return desc.parts.some((p) => p.kind === "memory") && desc.parts.some((p) => p.kind === "disk");
}

const LIVE: readonly SnapshotState[] = ["creating", "local", "uploading", "durable"];
const RESTORABLE: readonly SnapshotState[] = ["local", "durable"];

const SELECT = `SELECT id, sandbox_id AS "sandboxId", node_id AS "nodeId", state, purpose, name, created_at AS "createdAt",
  descriptor, wrapped_key AS "wrappedKey" FROM snapshots`;
type Raw = Omit<SnapshotRow, "descriptor"> & { descriptor: Omit<SnapshotDescriptor, "wrappedKey"> | null; wrappedKey: string | null };
const toRow = (r: Raw): SnapshotRow => ({
  id: r.id,
  sandboxId: r.sandboxId,
  nodeId: r.nodeId,
  state: r.state,
  purpose: r.purpose,
  name: r.name,
  createdAt: r.createdAt,
  descriptor: r.descriptor ? { ...r.descriptor, ...(r.wrappedKey ? { wrappedKey: r.wrappedKey } : {}) } : null,
});

export class StoreSnapshotRepo implements SnapshotRepo {
  constructor(private readonly db: Db) {}

  async begin(input: BeginInput): Promise<string> {
    const id = newSnapshotId();
    await this.db.transaction(async (tx) => {
      await createSnapshot(tx, { id, sandboxId: input.sandboxId, executionId: input.executionId, nodeId: input.nodeId as NodeId, kind: "full" });
      await tx.execute(`UPDATE snapshots SET purpose = $2, name = $3 WHERE id = $1`, [id, input.purpose, input.name ?? null]);
    });
    return id;
  }

  async finish(id: string, desc: SnapshotDescriptor): Promise<SnapshotRow> {
    const { wrappedKey, timings: _t, ...kept } = desc;
    return this.db.transaction(async (tx) => {
      await updateSnapshot(tx, id, { state: isDurable(desc) ? "durable" : "local", parts: desc.parts, sizeBytes: desc.sizeBytes }, { from: ["creating"] });
      await tx.execute(`UPDATE snapshots SET descriptor = $2::jsonb, wrapped_key = $3 WHERE id = $1`, [id, json({ ...kept, timings: {} }), wrappedKey ?? null]);
      return toRow((await tx.maybeOne<Raw>(`${SELECT} WHERE id = $1`, [id]))!);
    });
  }

  async fail(id: string, error: string): Promise<void> {
    await this.db.execute(`UPDATE snapshots SET state = 'failed', error = $2 WHERE id = $1 AND state = ANY($3::text[])`, [id, error.slice(0, 2000), [...LIVE]]);
  }

  async latest(sandboxId: string, purpose: SnapshotPurpose): Promise<SnapshotRow | null> {
    const r = await this.db.maybeOne<Raw>(
      `${SELECT} WHERE sandbox_id = $1 AND purpose = $2 AND state = ANY($3::text[]) AND descriptor IS NOT NULL ORDER BY created_at DESC, id DESC LIMIT 1`,
      [sandboxId, purpose, [...RESTORABLE]],
    );
    return r ? toRow(r) : null;
  }

  async get(id: string): Promise<SnapshotRow | null> {
    const r = await this.db.maybeOne<Raw>(`${SELECT} WHERE id = $1`, [id]);
    return r ? toRow(r) : null;
  }

  async list(sandboxId: string): Promise<SnapshotRow[]> {
    const rows = await this.db.query<Raw>(`${SELECT} WHERE sandbox_id = $1 AND state = ANY($2::text[]) ORDER BY created_at DESC, id DESC`, [sandboxId, [...RESTORABLE]]);
    return rows.map(toRow);
  }

  async markDeleted(sandboxId: string, f: DeleteFilter = {}): Promise<SnapshotRow[]> {
    const rows = await this.db.query<Raw>(
      `UPDATE snapshots SET state = 'deleted', deleted_at = coalesce(deleted_at, now())
        WHERE sandbox_id = $1 AND state = ANY($2::text[]) AND ($3::text IS NULL OR id = $3)
          AND ($4::text IS NULL OR purpose = $4) AND ($5::text IS NULL OR id <> $5)
        RETURNING id, sandbox_id AS "sandboxId", node_id AS "nodeId", state, purpose, name, created_at AS "createdAt", descriptor, wrapped_key AS "wrappedKey"`,
      [sandboxId, [...LIVE], f.snapshotId ?? null, f.purpose ?? null, f.except ?? null],
    );
    return rows.map(toRow);
  }

  async newExecution(sandboxId: string, executionId: string): Promise<void> {
    await createExecution(this.db, { sandboxId, id: executionId as ExecutionId });
  }

  async listNamed(q: NamedQuery): Promise<SnapshotRow[]> {
    const rows = await this.db.query<Raw>(
      `SELECT n.id, n.sandbox_id AS "sandboxId", n.node_id AS "nodeId", n.state, n.purpose, n.name, n.created_at AS "createdAt",
              n.descriptor, n.wrapped_key AS "wrappedKey"
         FROM snapshots n JOIN sandboxes s ON s.id = n.sandbox_id
        WHERE s.tenant_id = $1 AND n.purpose = 'named' AND n.state = ANY($2::text[]) AND n.descriptor IS NOT NULL
          AND ($3::text IS NULL OR n.sandbox_id = $3) AND ($4::text IS NULL OR n.name = $4)
          AND ($5::text IS NULL OR (n.created_at, n.id) < (SELECT a.created_at, a.id FROM snapshots a WHERE a.id = $5))
        ORDER BY n.created_at DESC, n.id DESC LIMIT $6`,
      [q.tenantId, [...RESTORABLE], q.sandboxId ?? null, q.name ?? null, q.after ?? null, q.limit],
    );
    return rows.map(toRow);
  }

  async findNamed(tenantId: string, idOrName: string): Promise<SnapshotRow | null> {
    const r = await this.db.maybeOne<Raw>(
      `SELECT n.id, n.sandbox_id AS "sandboxId", n.node_id AS "nodeId", n.state, n.purpose, n.name, n.created_at AS "createdAt",
              n.descriptor, n.wrapped_key AS "wrappedKey"
         FROM snapshots n JOIN sandboxes s ON s.id = n.sandbox_id
        WHERE s.tenant_id = $1 AND n.purpose = 'named' AND n.state = ANY($2::text[]) AND n.descriptor IS NOT NULL
          AND (n.id = $3 OR n.name = $3)
        ORDER BY (n.id = $3) DESC, n.created_at DESC, n.id DESC LIMIT 1`,
      [tenantId, [...RESTORABLE], idOrName],
    );
    return r ? toRow(r) : null;
  }

  hold(id: string, until: Date): Promise<boolean> {
    return holdSnapshot(this.db, id, until);
  }

  release(id: string): Promise<void> {
    return releaseSnapshot(this.db, id);
  }
}

export class MemorySnapshotRepo implements SnapshotRepo {
  readonly rows = new Map<string, SnapshotRow>();
  readonly executions: string[] = [];
  /** Snapshot id → the source sandbox's tenant (given at begin). */
  readonly #tenants = new Map<string, string>();
  #seq = 0;

  async begin(input: BeginInput): Promise<string> {
    const id = newSnapshotId();
    if (input.tenantId) this.#tenants.set(id, input.tenantId);
    // Strictly increasing times so `latest` is deterministic within a millisecond.
    this.rows.set(id, { id, sandboxId: input.sandboxId, nodeId: input.nodeId, state: "creating", purpose: input.purpose, name: input.name ?? null, createdAt: new Date(Date.now() + this.#seq++), descriptor: null });
    return id;
  }
  async finish(id: string, desc: SnapshotDescriptor): Promise<SnapshotRow> {
    const r = this.rows.get(id);
    if (!r || r.state !== "creating") throw new Error(`snapshot ${id} is not being created`);
    r.state = isDurable(desc) ? "durable" : "local";
    r.descriptor = structuredClone(desc);
    return structuredClone(r);
  }
  async fail(id: string): Promise<void> {
    const r = this.rows.get(id);
    if (r && LIVE.includes(r.state)) r.state = "failed";
  }
  async latest(sandboxId: string, purpose: SnapshotPurpose): Promise<SnapshotRow | null> {
    return (await this.list(sandboxId)).find((r) => r.purpose === purpose) ?? null;
  }
  async get(id: string): Promise<SnapshotRow | null> {
    const r = this.rows.get(id);
    return r ? structuredClone(r) : null;
  }
  async list(sandboxId: string): Promise<SnapshotRow[]> {
    return [...this.rows.values()]
      .filter((r) => r.sandboxId === sandboxId && RESTORABLE.includes(r.state) && r.descriptor)
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime())
      .map((r) => structuredClone(r));
  }
  async markDeleted(sandboxId: string, f: DeleteFilter = {}): Promise<SnapshotRow[]> {
    const out: SnapshotRow[] = [];
    for (const r of this.rows.values()) {
      if (r.sandboxId !== sandboxId || !LIVE.includes(r.state)) continue;
      if ((f.snapshotId && r.id !== f.snapshotId) || (f.purpose && r.purpose !== f.purpose) || (f.except && r.id === f.except)) continue;
      r.state = "deleted";
      out.push(structuredClone(r));
    }
    return out;
  }
  async newExecution(_sandboxId: string, executionId: string): Promise<void> {
    this.executions.push(executionId);
  }
  #named(tenantId: string): SnapshotRow[] {
    return [...this.rows.values()]
      .filter((r) => r.purpose === "named" && this.#tenants.get(r.id) === tenantId && RESTORABLE.includes(r.state) && r.descriptor)
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : -1));
  }
  async listNamed(q: NamedQuery): Promise<SnapshotRow[]> {
    let rows = this.#named(q.tenantId).filter((r) => (!q.sandboxId || r.sandboxId === q.sandboxId) && (!q.name || r.name === q.name));
    if (q.after) {
      const a = this.rows.get(q.after);
      if (a) rows = rows.filter((r) => r.createdAt < a.createdAt || (r.createdAt.getTime() === a.createdAt.getTime() && r.id < a.id));
    }
    return rows.slice(0, q.limit).map((r) => structuredClone(r));
  }
  async findNamed(tenantId: string, idOrName: string): Promise<SnapshotRow | null> {
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
