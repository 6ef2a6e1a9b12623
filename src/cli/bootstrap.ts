/**
 * First-start state of a cluster: the default tenant and its API key (idempotent). A key
 * the operator revoked, or a default tenant they disabled, stays so: a restart neither
 * recreates the key (its hash exists) nor fails on it. `usable` says whether the key
 * still authenticates.
 */
import type { Db } from "../store/db.ts";
import { ensureTenant, type Tenant } from "../store/tenants.ts";
import { apiKeyRecorded, createApiKey, lookupApiKey } from "../store/api-keys.ts";

export const DEFAULT_TENANT = "default";

export async function bootstrapDefaultTenant(db: Db, apiKey: string): Promise<{ tenant: Tenant; usable: boolean }> {
  return db.transaction(async (tx) => {
    const tenant = await ensureTenant(tx, { name: DEFAULT_TENANT });
    if (await lookupApiKey(tx, apiKey)) return { tenant, usable: true };
    if (await apiKeyRecorded(tx, apiKey)) return { tenant, usable: false };
    await createApiKey(tx, { tenantId: tenant.id, name: "default", plaintext: apiKey });
    return { tenant, usable: true };
  });
}
