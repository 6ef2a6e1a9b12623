/** First-start state of a cluster: the default tenant and its API key (idempotent). */
import type { Db } from "../store/db.ts";
import { ensureTenant, type Tenant } from "../store/tenants.ts";
import { createApiKey, lookupApiKey } from "../store/api-keys.ts";

export const DEFAULT_TENANT = "default";

export async function bootstrapDefaultTenant(db: Db, apiKey: string): Promise<Tenant> {
  return db.transaction(async (tx) => {
    const tenant = await ensureTenant(tx, { name: DEFAULT_TENANT });
    if (!(await lookupApiKey(tx, apiKey))) await createApiKey(tx, { tenantId: tenant.id, name: "default", plaintext: apiKey });
    return tenant;
  });
}
