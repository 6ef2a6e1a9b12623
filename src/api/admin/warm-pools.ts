/**
 * Admin: warm pools (`/admin/api/v1/warm-pools`). The spec is desired state; the
 * controller leader's reconciler converges members to it and writes `status`.
 *
 *   GET    /admin/api/v1/warm-pools                    → { pools: [...] }
 *   GET    /admin/api/v1/warm-pools/{template}         → pool with members
 *   PUT    /admin/api/v1/warm-pools/{template}         { size, max_size?, vcpu?, memory_mib?, disk_mib?, tenant_id?,
 *                                                        idle_policy?, min_free_memory_percent? } → pool
 *   DELETE /admin/api/v1/warm-pools/{template}         → 204 (members drain)
 *
 * `{template}` is an alias (URL-encoded `alias:tag` too) or a template id; `tenant_id`
 * names whose private template it is (NULL: platform/public, any tenant adopts).
 * `idle_policy`: `running` (default), `suspended` (idle members kept suspended on their
 * node, restored when adopted) or `suspend_when_memory_short` (suspended while their node's
 * free memory is under `min_free_memory_percent` of its budget, resumed once it is not);
 * absent fields take SPACE_WARM_POOL_IDLE_POLICY / _MIN_FREE_MEMORY_PERCENT. `max_size`
 * (at least `size`): the pool grows for a burst up to it, to the creates it could have served
 * in the last SPACE_WARM_POOL_DEMAND_WINDOW_S (its status shows that `demand` and the size it
 * holds now).
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Db } from "../../store/db.ts";
import type { TenantId } from "../../core/ids.ts";
import { notFound } from "../../core/errors.ts";
import { authenticateBearer, bearerOf, requireScope } from "../auth.ts";
import { parseInput as parse } from "../error-body.ts";
import { deleteWarmPool, getWarmPool, listSlots, listWarmPools, upsertWarmPool, type IdlePolicy, type WarmPool } from "../../store/warm-pools.ts";
import { getTenant } from "../../store/tenants.ts";
import { PoolBody, PoolParams } from "./admin-schemas.ts";

export interface WarmPoolAdminDeps {
  db: Db;
  adminToken: string;
  /** Sandbox defaults: a pool without a shape gets what a create asking for none gets; idle policy from the config. */
  defaults: { vcpu: number; memoryMib: number; diskMib: number; idlePolicy: IdlePolicy; minFreeMemoryPercent: number };
}

export function present(p: WarmPool) {
  return {
    template: p.name,
    tenant_id: p.tenantId,
    size: p.size,
    max_size: p.maxSize ?? p.size,
    vcpu: p.vcpu,
    memory_mib: p.memoryMib,
    disk_mib: p.diskMib,
    idle_policy: p.idlePolicy,
    min_free_memory_percent: p.minFreeMemoryPercent,
    source: p.source,
    template_id: p.templateId,
    build_id: p.buildId,
    status: p.status,
    created_at: p.createdAt,
    updated_at: p.updatedAt,
  };
}

export function registerWarmPoolAdminRoutes(app: FastifyInstance, deps: WarmPoolAdminDeps): void {
  const admin = async (req: FastifyRequest) => requireScope(await authenticateBearer(deps.db, bearerOf(req), deps.adminToken), "admin");
  const base = "/admin/api/v1/warm-pools";

  app.get(base, async (req) => {
    await admin(req);
    return { pools: (await listWarmPools(deps.db)).map(present) };
  });
  app.get(`${base}/:template`, async (req) => {
    await admin(req);
    const { template } = parse(PoolParams, req.params, "path");
    const p = await getWarmPool(deps.db, template);
    if (!p) throw notFound(`warm pool '${template}' not found`);
    const members = (await listSlots(deps.db, template)).map((s) => ({
      id: s.id,
      state: s.state,
      sandbox_id: s.sandboxId,
      node_id: s.nodeId,
      build_id: s.buildId,
      reason: s.reason,
      ready_at: s.readyAt,
    }));
    return { ...present(p), members };
  });
  app.put(`${base}/:template`, async (req) => {
    await admin(req);
    const { template } = parse(PoolParams, req.params, "path");
    const b = parse(PoolBody, req.body, "body");
    if (b.tenant_id) await getTenant(deps.db, b.tenant_id as TenantId); // not_found names it
    const p = await upsertWarmPool(deps.db, {
      name: template,
      tenantId: (b.tenant_id ?? null) as TenantId | null,
      size: b.size,
      maxSize: b.max_size ?? null,
      vcpu: b.vcpu ?? deps.defaults.vcpu,
      memoryMib: b.memory_mib ?? deps.defaults.memoryMib,
      diskMib: b.disk_mib ?? deps.defaults.diskMib,
      idlePolicy: b.idle_policy ?? deps.defaults.idlePolicy,
      minFreeMemoryPercent: b.min_free_memory_percent ?? deps.defaults.minFreeMemoryPercent,
      source: "api",
    });
    return present(p!);
  });
  app.delete(`${base}/:template`, async (req, reply) => {
    await admin(req);
    const { template } = parse(PoolParams, req.params, "path");
    if (!(await deleteWarmPool(deps.db, template))) throw notFound(`warm pool '${template}' not found`);
    return reply.status(204).send();
  });
}
