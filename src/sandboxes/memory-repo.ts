/**
 * In-memory SandboxRepo / TemplateResolver / ApiKeyAuth: a test double with the same
 * semantics as the store-backed implementation (queries.ts).
 */
import { createHash } from "node:crypto";
import type { ExecutionId, SandboxId, TenantId } from "../core/ids.ts";
import { transitions } from "../store/sandboxes.ts";
import { decodeCursor, encodeCursor, isAfter } from "./cursor.ts";
import {
  endAtOf,
  isLive,
  type NewSandboxRecord,
  type ApiKeyAuth,
  type ListPage,
  type ListQuery,
  type TemplateMatch,
  type SandboxPatch,
  type SandboxRecord,
  type SandboxRepo,
  type SandboxState,
  type TemplateResolver,
} from "./model.ts";

export class MemorySandboxRepo implements SandboxRepo {
  readonly rows = new Map<string, SandboxRecord>();
  /** Insertion order, like the store's `seq` (the cursor key). */
  readonly #seq = new Map<string, number>();

  /** The row as the store would insert it (its column defaults). */
  async insert(rec: NewSandboxRecord, _executionId: ExecutionId) {
    this.#seq.set(rec.id, this.#seq.size + 1);
    const now = new Date();
    const row: SandboxRecord = {
      id: rec.id,
      seq: this.#seq.size,
      tenantId: rec.tenantId,
      templateId: rec.templateId ?? null,
      buildId: rec.buildId ?? null,
      alias: rec.alias ?? null,
      state: rec.state ?? "creating",
      generation: 1,
      nodeId: rec.nodeId ?? null,
      address: rec.address ?? null,
      vcpu: rec.vcpu,
      memoryMib: rec.memoryMib,
      diskMib: rec.diskMib,
      metadata: rec.metadata ?? {},
      envVars: rec.envVars ?? {},
      envdAccessToken: rec.envdAccessToken ?? null,
      trafficAccessToken: rec.trafficAccessToken ?? null,
      secure: rec.secure ?? false,
      allowInternetAccess: rec.allowInternetAccess ?? true,
      network: rec.network ?? {},
      lifecycle: rec.lifecycle ?? { onTimeout: "kill", autoResume: false },
      failureCode: null,
      failureMessage: null,
      startedAt: rec.startedAt ?? null,
      endAt: rec.endAt ?? null,
      createdAt: now,
      updatedAt: now,
      killedAt: null,
    };
    this.rows.set(rec.id, structuredClone(row));
    return row;
  }
  async get(tenantId: TenantId, id: SandboxId) {
    const r = this.rows.get(id);
    return r && r.tenantId === tenantId ? structuredClone(r) : null;
  }
  async getById(id: SandboxId) {
    const r = this.rows.get(id);
    return r ? structuredClone(r) : null;
  }
  async list(tenantId: TenantId, q: ListQuery): Promise<ListPage> {
    const cursor = q.cursor ? decodeCursor(q.cursor) : null;
    const dir = q.order === "asc" ? 1 : -1;
    const all = [...this.rows.values()]
      .filter((r) => r.tenantId === tenantId && q.states.includes(r.state))
      .filter((r) => Object.entries(q.metadata).every(([k, v]) => r.metadata[k] === v))
      .filter((r) => !q.templateId || r.templateId === q.templateId || r.alias === q.templateId)
      .filter((r) => !q.startedAfter || (r.startedAt !== null && r.startedAt >= q.startedAfter))
      .filter((r) => !cursor || isAfter({ createdAtMs: this.#seq.get(r.id)!, id: r.id }, cursor, q.order))
      .sort((a, b) => dir * (this.#seq.get(a.id)! - this.#seq.get(b.id)!));
    const items = all.slice(0, q.limit);
    const last = items[items.length - 1];
    return {
      items: items.map((r) => structuredClone(r)),
      cursor: all.length > q.limit && last ? encodeCursor({ createdAtMs: this.#seq.get(last.id)!, id: last.id }) : null,
    };
  }
  async transition(id: SandboxId, from: readonly SandboxState[], to: SandboxState, patch: SandboxPatch = {}) {
    const r = this.rows.get(id);
    if (!r || !from.includes(r.state)) return null;
    for (const f of from) if (!(transitions[f] as readonly SandboxState[]).includes(to)) throw new Error(`illegal transition ${f} → ${to}`);
    Object.assign(r, patch, { state: to });
    return structuredClone(r);
  }
  async update(id: SandboxId, patch: SandboxPatch) {
    const r = this.rows.get(id);
    if (!r || !isLive(r.state)) return null;
    Object.assign(r, patch);
    return structuredClone(r);
  }
  async listExpired(now: Date, limit: number) {
    return [...this.rows.values()]
      .filter((r) => (r.state === "running" || r.state === "paused") && endAtOf(r) <= now)
      .sort((a, b) => endAtOf(a).getTime() - endAtOf(b).getTime())
      .slice(0, limit)
      .map((r) => structuredClone(r));
  }
  async nextEndAt() {
    let min: Date | null = null;
    for (const r of this.rows.values()) {
      if ((r.state === "running" || r.state === "paused") && r.endAt && (!min || r.endAt < min)) min = r.endAt;
    }
    return min;
  }
  async listRunningSecure() {
    return [...this.rows.values()].filter((r) => r.state === "running" && r.envdAccessToken).map((r) => structuredClone(r));
  }
}

export class MemoryTemplates implements TemplateResolver {
  constructor(readonly templates: Array<TemplateMatch & { tenantId?: TenantId }> = [{ templateId: "base", alias: "base", rootfsSizeMib: null }]) {}
  async resolve(tenantId: TenantId, idOrAlias: string): Promise<TemplateMatch | null> {
    const t = this.templates.find(
      (t) => (!t.tenantId || t.tenantId === tenantId) && (t.templateId === idOrAlias || t.alias === idOrAlias),
    );
    return t ? { templateId: t.templateId, alias: t.alias === idOrAlias ? t.alias : null, rootfsSizeMib: t.rootfsSizeMib } : null;
  }
}

export class MemoryApiKeys implements ApiKeyAuth {
  readonly #byHash = new Map<string, TenantId>();
  add(rawKey: string, tenantId: TenantId) {
    this.#byHash.set(sha256(rawKey), tenantId);
  }
  async tenantForApiKey(rawKey: string) {
    return this.#byHash.get(sha256(rawKey)) ?? null;
  }
}

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");
