/**
 * `GET|PUT /admin/api/v1/tenants/{id}/quotas`: a tenant's quotas and create rate limits.
 * GET answers the limits enforced (its overrides over the process defaults, SPACE_QUOTA_*
 * and SPACE_RATE_LIMIT_*), the overrides themselves and what it holds live now; PUT
 * replaces the overrides (a field absent or null = the default). A lowered quota refuses
 * the next admissions; it never ends a sandbox that is already live.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { z } from "zod";
import type { TenantId } from "../../core/ids.ts";
import type { Db } from "../../store/db.ts";
import {
  effectiveQuotas,
  getQuotaOverrides,
  putQuotaOverrides,
  quotaNames,
  quotaUsage,
  type QuotaLimits,
  type QuotaName,
  type QuotaOverrides,
} from "../../store/tenant-quotas.ts";
import { authenticateBearer, bearerOf, requireScope } from "../auth.ts";
import { parseInput as parse } from "../error-body.ts";
import { QuotaBody, TenantParams } from "./admin-schemas.ts";

export interface TenantQuotaDeps {
  db: Db;
  adminToken: string;
  /** The process defaults (SPACE_QUOTA_*, SPACE_RATE_LIMIT_*). */
  defaults: QuotaLimits;
}

/** Store names ↔ wire names (snake_case, as every Admin body). */
const WIRE: Record<QuotaName, keyof QuotaBody> = {
  sandboxes: "sandboxes",
  vcpu: "vcpu",
  memoryMib: "memory_mib",
  diskMib: "disk_mib",
  snapshots: "snapshots",
  volumes: "volumes",
  volumeMib: "volume_mib",
  createsPerS: "creates_per_s",
  createBurst: "create_burst",
  keyCreatesPerS: "key_creates_per_s",
  keyCreateBurst: "key_create_burst",
};
type QuotaBody = z.infer<typeof QuotaBody>;

const toWire = <T>(v: Record<QuotaName, T>): Record<string, T> => Object.fromEntries(quotaNames.map((n) => [WIRE[n], v[n]]));

export function registerTenantQuotaRoutes(app: FastifyInstance, deps: TenantQuotaDeps): void {
  const admin = async (req: FastifyRequest) => requireScope(await authenticateBearer(deps.db, bearerOf(req), deps.adminToken), "admin");
  const path = "/admin/api/v1/tenants/:id/quotas";

  const present = async (tenantId: TenantId, overrides: QuotaOverrides) => {
    const u = await quotaUsage(deps.db, tenantId);
    return {
      tenant_id: tenantId,
      limits: toWire(effectiveQuotas(deps.defaults, overrides)),
      overrides: toWire(overrides),
      usage: { sandboxes: u.sandboxes, vcpu: u.vcpu, memory_mib: u.memoryMib, disk_mib: u.diskMib, snapshots: u.snapshots, volumes: u.volumes, volume_mib: u.volumeMib },
    };
  };

  app.get(path, async (req) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    return present(id as TenantId, await getQuotaOverrides(deps.db, id as TenantId));
  });
  app.put(path, async (req) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    const b = parse(QuotaBody, req.body, "body");
    const overrides = Object.fromEntries(quotaNames.map((n) => [n, b[WIRE[n]] ?? null])) as QuotaOverrides;
    return present(id as TenantId, await putQuotaOverrides(deps.db, id as TenantId, overrides));
  });
}
