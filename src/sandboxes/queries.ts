/**
 * Store-backed implementations of the service's ports, over the store's `Db` and typed
 * queries (src/store): every statement lives in the store; the rows are the service's
 * records as they are (one record type per table).
 */
import type { Db } from "../store/db.ts";
import {
  findSandbox,
  followSandboxExecutions,
  insertSandbox,
  listExpiredSandboxes,
  listRunningSecureSandboxes,
  listSandboxes,
  nextSandboxEndAt,
  patchSandbox,
  sandboxStates,
  transitionSandbox,
} from "../store/sandboxes.ts";
import { findTemplateByAlias, findTemplateByIdOrName, newestReadyBuild } from "../store/template-resolution.ts";
import { findPlacementNode, listNodes, listPlacementNodes, templateEnvironmentsOnNodes, type NodeRecord, type PlacementNodeRow } from "../store/nodes.ts";
import { createExecution } from "../store/executions.ts";
import { admitLiveSandbox, quotaStates, type QuotaLimits } from "../store/tenant-quotas.ts";
import { SpaceError } from "../core/errors.ts";
import { Recent } from "../core/recent.ts";
import type { ExecutionId, SandboxId, TenantId } from "../core/ids.ts";
import { capacityOf, measuredOf } from "../substrate/capacity.ts";
import type { NodeDirectory, NodeEntry } from "../substrate/node-directory.ts";
import type { EnvironmentBinding } from "../substrate/placement.ts";
import {
  isLive,
  type ListPage,
  type ListQuery,
  type NewSandboxRecord,
  type TemplateMatch,
  type SandboxPatch,
  type SandboxRecord,
  type SandboxRepo,
  type SandboxState,
  type TemplateResolver,
} from "./model.ts";

/** Every live state: a patch never touches an ended sandbox. */
const LIVE = sandboxStates.filter(isLive);

const missOrConflict = (e: unknown) => e instanceof SpaceError && (e.code === "not_found" || e.code === "failed_precondition");

/** Whether moving from one of `from` to `to` can make a sandbox count against its tenant's quota. */
const entersQuota = (from: readonly SandboxState[], to: SandboxState) => quotaStates.includes(to) && from.some((f) => !quotaStates.includes(f));

/**
 * `quotas`: the tenant quota defaults (SPACE_QUOTA_*); every insert and every move into a
 * counted state is admitted against them in its own transaction (store/tenant-quotas.ts).
 * Absent = no quotas (tests of other things).
 */
export class StoreSandboxRepo implements SandboxRepo {
  constructor(
    private readonly db: Db,
    private readonly quotas?: QuotaLimits,
  ) {}

  async insert(rec: NewSandboxRecord, executionId: ExecutionId): Promise<SandboxRecord> {
    return this.db.transaction(async (tx) => {
      if (this.quotas && quotaStates.includes(rec.state ?? "creating")) {
        await admitLiveSandbox(tx, rec.tenantId, this.quotas, { vcpu: rec.vcpu, memoryMib: rec.memoryMib, diskMib: rec.diskMib }, null);
      }
      const row = await insertSandbox(tx, rec);
      await createExecution(tx, { sandboxId: rec.id, id: executionId });
      return row;
    });
  }

  async checkQuota(tenantId: TenantId, shape: { vcpu: number; memoryMib: number; diskMib: number }): Promise<void> {
    const quotas = this.quotas;
    if (quotas) await this.db.transaction((tx) => admitLiveSandbox(tx, tenantId, quotas, shape, null));
  }

  async get(tenantId: TenantId, id: SandboxId) {
    return (await findSandbox(this.db, id, tenantId)) ?? null;
  }

  async getById(id: SandboxId) {
    return (await findSandbox(this.db, id)) ?? null;
  }

  async list(tenantId: TenantId, q: ListQuery): Promise<ListPage> {
    const page = await listSandboxes(this.db, {
      tenantId,
      states: q.states,
      metadata: q.metadata,
      ...(q.templateId ? { templateId: q.templateId } : {}),
      ...(q.startedAfter ? { startedAfter: q.startedAfter } : {}),
      order: q.order,
      limit: q.limit,
      ...(q.cursor ? { cursor: q.cursor } : {}),
    });
    return { items: page.items, cursor: page.nextCursor };
  }

  async transition(id: SandboxId, from: readonly SandboxState[], to: SandboxState, patch: SandboxPatch = {}) {
    try {
      return await this.db.transaction(async (tx) => {
        if (this.quotas && entersQuota(from, to)) {
          // The row is read first (it names the tenant and shape); the lock the admission takes orders competing admissions.
          const cur = await findSandbox(tx, id);
          if (cur && from.includes(cur.state) && !quotaStates.includes(cur.state)) {
            await admitLiveSandbox(tx, cur.tenantId, this.quotas, { vcpu: patch.vcpu ?? cur.vcpu, memoryMib: patch.memoryMib ?? cur.memoryMib, diskMib: patch.diskMib ?? cur.diskMib }, id);
          }
        }
        const s = await transitionSandbox(tx, id, from, to, patch);
        await followSandboxExecutions(tx, id, to, s.nodeId, patch.failureMessage ?? null);
        return s;
      });
    } catch (e) {
      if (missOrConflict(e)) return null;
      throw e;
    }
  }

  async update(id: SandboxId, patch: SandboxPatch) {
    try {
      return await patchSandbox(this.db, id, patch, { inStates: LIVE });
    } catch (e) {
      if (missOrConflict(e)) return null;
      throw e;
    }
  }

  async listExpired(_now: Date, limit: number) {
    return listExpiredSandboxes(this.db, limit);
  }

  nextEndAt(): Promise<Date | null> {
    return nextSandboxEndAt(this.db);
  }

  async listRunningSecure() {
    return listRunningSecureSandboxes(this.db);
  }
}

const RESOLVE_CACHE_MS = 1000;

/**
 * Templates by id or alias: the tenant's own, platform ones (tenant NULL) or public; the
 * rootfs size from the newest ready build. When the store knows none, a template that a
 * ready node publishes in its inventory is accepted (the node builds `base` itself),
 * with the rootfs size the node reports.
 */
export class StoreTemplates implements TemplateResolver {
  /**
   * Templates only node inventories know (`base`), believed for RESOLVE_CACHE_MS: finding
   * one costs three queries, on every create (twice for a Native create). They cannot be
   * deleted through the API; placement still checks the node that runs it.
   */
  readonly #nodeOnly = new Recent<TemplateMatch>(RESOLVE_CACHE_MS);
  readonly #bindings = new Recent<Promise<EnvironmentBinding>>(RESOLVE_CACHE_MS);

  /** `nodes`: where node-only templates are found when nodes are not in the store (Kubernetes: Node annotations). */
  constructor(
    private readonly db: Db,
    private readonly nodes?: NodeDirectory,
  ) {}

  async resolve(tenantId: TenantId, idOrAlias: string): Promise<TemplateMatch | null> {
    const hit = this.#nodeOnly.get(idOrAlias);
    if (hit) return hit;
    const found = (await findTemplateByAlias(this.db, idOrAlias, tenantId)) ?? (await findTemplateByIdOrName(this.db, idOrAlias, tenantId));
    if (found) return found;
    // A template only a node's inventory knows (e.g. `base`): ready nodes first, but a node
    // that is restarting still counts, so placement answers "unavailable" (retryable), not "not found".
    const known = await this.#fromInventory(idOrAlias);
    if (known) this.#nodeOnly.set(idOrAlias, known);
    return known;
  }

  async #fromInventory(idOrAlias: string): Promise<TemplateMatch | null> {
    if (this.nodes) {
      const known = (await this.nodes.list(AbortSignal.timeout(10_000))).some((n) => n.templates.includes(idOrAlias));
      return known ? { templateId: idOrAlias, alias: null, rootfsSizeMib: null } : null;
    }
    const nodes = (await listNodes(this.db)).sort((a, b) => Number(b.status === "ready") - Number(a.status === "ready"));
    for (const n of nodes) {
      const t = inventory(n).find((t) => t.templateId === idOrAlias);
      if (t) return { templateId: t.templateId, alias: null, rootfsSizeMib: t.rootfsSizeMib ?? null };
    }
    return null;
  }

  /**
   * Believed for RESOLVE_CACHE_MS and shared by the creates that ask at once: every create
   * asks, and the node-inventory fallback reads every node's inventory (docs/scale.md).
   */
  binding(templateId: string): Promise<EnvironmentBinding> {
    const hit = this.#bindings.get(templateId);
    if (hit) return hit;
    const read = templateBinding(this.db, templateId);
    this.#bindings.set(templateId, read);
    read.catch(() => this.#bindings.delete(templateId));
    return read;
  }
}

function inventory(n: Pick<NodeRecord, "templates">): Array<{ templateId: string; rootfsSizeMib?: number }> {
  return (Array.isArray(n.templates) ? n.templates : []).flatMap((t) => {
    if (typeof t === "string") return [{ templateId: t }];
    if (t && typeof t === "object" && typeof (t as { templateId?: unknown }).templateId === "string") {
      const r = (t as { rootfsSizeMib?: unknown }).rootfsSizeMib;
      return [{ templateId: (t as { templateId: string }).templateId, ...(typeof r === "number" ? { rootfsSizeMib: r } : {}) }];
    }
    return [];
  });
}

/**
 * Registered nodes as the direct substrate sees them, whatever their status (placement
 * excludes unavailable/draining/fenced ones and says so). `address` is node-api's URL.
 */
export class StoreNodeDirectory implements NodeDirectory {
  constructor(private readonly db: Db) {}
  async list(): Promise<NodeEntry[]> {
    return (await listPlacementNodes(this.db, "direct")).map(toNodeEntry);
  }
  async get(id: string): Promise<NodeEntry | null> {
    const n = await findPlacementNode(this.db, id);
    return n ? toNodeEntry(n) : null;
  }
}

export function toNodeEntry(n: PlacementNodeRow): NodeEntry {
  const used = n.used ?? {};
  const capacity = capacityOf(n.capacity ?? {});
  const num = (...keys: string[]) => {
    for (const k of keys) if (typeof used[k] === "number") return used[k];
    return undefined;
  };
  return {
    id: n.id,
    name: n.name,
    url: /^https?:\/\//.test(n.address) ? n.address : `http://${n.address}`,
    status: n.status,
    nodeGroup: n.nodeGroup,
    labels: n.labels ?? {},
    usableEnvironments: n.usableEnvironments ?? [],
    capacity,
    used: capacity
      ? { vcpu: num("vcpu") ?? 0, memoryMib: num("memoryMib") ?? 0, diskMib: num("diskMib") ?? 0, networkSlots: num("networkSlots", "slots") ?? 0 }
      : null,
    measured: measuredOf(used),
    ...(n.memoryFullSlots !== null ? { memoryFullSlots: n.memoryFullSlots } : {}),
    templates: inventory(n).map((t) => t.templateId),
  };
}

/**
 * The execution environment template work is bound to (behaviours.md C): the newest
 * ready build's recorded environment; else the one every ready node holding the
 * template reports in its inventory; else unbound. Disagreeing nodes, or a recorded
 * value that is not a digest, make the binding unreadable.
 */
export async function templateBinding(db: Db, templateId: string): Promise<EnvironmentBinding> {
  const build = await newestReadyBuild(db, templateId);
  if (build?.environment) {
    if (!ENV_DIGEST.test(build.environment)) return { kind: "unreadable", reason: `build ${build.id} records environment '${build.environment.slice(0, 80)}', not a digest` };
    return { kind: "bound", environment: build.environment, source: `build ${build.id}` };
  }
  const seen = new Set(await templateEnvironmentsOnNodes(db, templateId, ["ready", "draining"]));
  if (seen.size === 0) return { kind: "none" };
  if (seen.size > 1) return { kind: "unreadable", reason: `nodes report ${seen.size} different environments for template ${templateId}: ${[...seen].join(", ")}` };
  const env = [...seen][0]!;
  if (!ENV_DIGEST.test(env)) return { kind: "unreadable", reason: `nodes report environment '${env.slice(0, 80)}' for template ${templateId}, not a digest` };
  return { kind: "bound", environment: env, source: "node template inventory" };
}

/** `<algorithm>-<hex>` or `<algorithm>:<hex>` (see node/templates/environment.ts). */
const ENV_DIGEST = /^[a-z0-9]+[-:][0-9a-f]{12,128}$/;
