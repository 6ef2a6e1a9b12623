/**
 * The Admin API's zod schemas: the routes validate with them and admin-openapi.ts documents
 * them, so the document cannot drift from what the routes accept (as in Native's).
 */
import { z } from "zod";
import { idlePolicies } from "../../store/warm-pools.ts";
import { TOKEN_MAX_LIFETIME_S, tenantScopes } from "../auth.ts";

export const TenantBody = z.object({ name: z.string().min(1).max(100).regex(/^[A-Za-z0-9._-]+$/, "letters, digits, . _ -") }).strict();
export const KeyBody = z.object({ name: z.string().max(100).optional() }).strict();
const scopeValues = [...tenantScopes, "admin"] as const;
export const TokenBody = z
  .object({
    name: z.string().max(100).optional(),
    scopes: z.array(z.enum(scopeValues)).min(1),
    expires_in_s: z.number().int().positive().max(TOKEN_MAX_LIFETIME_S, `expires_in_s must be at most ${TOKEN_MAX_LIFETIME_S} (10 years)`).optional(),
  })
  .strict();
export const TenantParams = z.object({ id: z.string().min(1) });
export const ChildParams = z.object({ id: z.string().min(1), childId: z.string().min(1) });

const LabelKey = z.string().regex(/^[A-Za-z0-9._/-]{1,253}$/, "label keys: letters, digits, . _ / -");
const LabelValue = z.string().regex(/^[A-Za-z0-9._-]{0,63}$/, "label values: up to 63 letters, digits, . _ -");
const Numbers = z.record(z.string(), z.number());

export const RegisterNodeBody = z
  .object({
    id: z.uuid("id must be the node's UUID (from its node-id file)"),
    name: z.string().min(1).max(253),
    address: z.url("address must be node-api's URL, e.g. http://10.0.0.5:3002"),
    node_group: z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,63}$/, "1-63 letters, digits, . _ -")
      .default("default"),
    labels: z.record(LabelKey, LabelValue).default({}),
    verify: z.boolean().default(false),
    capacity: Numbers.optional(),
    used: Numbers.optional(),
    usable_environments: z.array(z.string().min(1)).optional(),
    templates: z.array(z.unknown()).optional(),
    version: z.string().max(100).optional(),
  })
  .strict();

export const HeartbeatBody = z
  .object({
    address: z.string().min(1),
    capacity: Numbers.optional(),
    used: Numbers.optional(),
    usable_environments: z.array(z.string().min(1)).optional(),
    templates: z.array(z.unknown()).optional(),
  })
  .strict();

export const DrainBody = z.object({ mode: z.enum(["gentle", "forced"]).default("gentle") }).strict();
export const ReasonBody = z.object({ reason: z.string().max(500).optional() }).strict();
export const NodeParams = z.object({ id: z.string().min(1) });
/** What a node kept at its start (the sandboxes it adopted or can restart). */
export const ReconciledBody = z.object({ sandbox_ids: z.array(z.string().min(1).max(64)).max(100_000) }).strict();
export const UnhealthyParams = z.object({ id: z.string().min(1), sandboxId: z.string().min(1).max(64) });
export const UnhealthyBody = z.object({ reason: z.string().min(1).max(1000) }).strict();

export const PoolParams = z.object({ template: z.string().min(1).max(200).regex(/^[A-Za-z0-9._:-]+$/, "a template id or alias[:tag]") });
export const PoolBody = z
  .object({
    size: z.number().int().min(0).max(1000),
    max_size: z.number().int().min(0).max(1000).nullable().optional().meta({ description: "the most members a burst grows the pool to (plan.ts burstSize); absent or null = never beyond size" }),
    vcpu: z.number().int().min(1).max(256).optional(),
    memory_mib: z.number().int().min(64).max(1_048_576).optional(),
    disk_mib: z.number().int().min(64).max(10_000_000).optional(),
    tenant_id: z.string().min(1).nullable().optional(),
    idle_policy: z.enum(idlePolicies, { message: `idle_policy must be one of ${idlePolicies.join(", ")}` }).optional(),
    min_free_memory_percent: z.number().int().min(0).max(100).optional(),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.max_size != null && b.max_size < b.size) ctx.addIssue({ code: "custom", message: `must be at least size (${b.size})`, path: ["max_size"] });
  });

/** A tenant's quota overrides (PUT replaces them all; absent or null = the process default). */
const Count = z.number().int().min(0).max(2_000_000_000);
const Rate = z.number().min(0).max(1_000_000).meta({ description: "creates per second; 0 = no limit" });
const Burst = z.number().int().min(1).max(1_000_000);
export const QuotaBody = z
  .object({
    sandboxes: Count.nullable().optional(),
    vcpu: Count.nullable().optional(),
    memory_mib: Count.nullable().optional(),
    disk_mib: Count.nullable().optional(),
    snapshots: Count.nullable().optional(),
    volumes: Count.nullable().optional(),
    volume_mib: Count.nullable().optional(),
    creates_per_s: Rate.nullable().optional(),
    create_burst: Burst.nullable().optional(),
    key_creates_per_s: Rate.nullable().optional(),
    key_create_burst: Burst.nullable().optional(),
  })
  .strict();

// Answers (documented only: the store's rows, as JSON).
const Time = z.string().meta({ description: "ISO 8601 time" });
export const Tenant = z.object({ id: z.string(), name: z.string(), createdAt: Time, disabledAt: Time.nullable() }).meta({ id: "Tenant" });
export const TenantList = z.object({ tenants: z.array(Tenant) });
export const ApiKey = z
  .object({ id: z.string(), tenantId: z.string(), name: z.string(), prefix: z.string(), createdAt: Time, lastUsedAt: Time.nullable(), revokedAt: Time.nullable() })
  .meta({ id: "ApiKey" });
export const ApiKeyList = z.object({ keys: z.array(ApiKey) });
export const NewApiKey = ApiKey.extend({ key: z.string().meta({ description: "shown once" }) });
export const Token = z
  .object({
    id: z.string(),
    tenantId: z.string().nullable(),
    name: z.string(),
    prefix: z.string(),
    scopes: z.array(z.string()),
    createdAt: Time,
    expiresAt: Time.nullable(),
    lastUsedAt: Time.nullable(),
    revokedAt: Time.nullable(),
  })
  .meta({ id: "Token" });
export const TokenList = z.object({ tokens: z.array(Token) });
export const NewToken = Token.extend({ token: z.string().meta({ description: "shown once" }) });
const QuotaValues = z.object({
  sandboxes: z.number(),
  vcpu: z.number(),
  memory_mib: z.number(),
  disk_mib: z.number(),
  snapshots: z.number(),
  volumes: z.number(),
  volume_mib: z.number(),
  creates_per_s: z.number(),
  create_burst: z.number(),
  key_creates_per_s: z.number(),
  key_create_burst: z.number(),
});
export const TenantQuotas = z
  .object({
    tenant_id: z.string(),
    limits: QuotaValues.meta({ description: "what is enforced: the overrides over the process defaults" }),
    overrides: z.object(Object.fromEntries(Object.keys(QuotaValues.shape).map((k) => [k, z.number().nullable()]))).meta({ description: "the tenant's own values; null = the default" }),
    usage: z
      .object({ sandboxes: z.number(), vcpu: z.number(), memory_mib: z.number(), disk_mib: z.number(), snapshots: z.number(), volumes: z.number(), volume_mib: z.number() })
      .meta({ description: "live now: sandboxes creating, running or paused in memory (suspended and stopped ones do not count), named snapshots, volumes" }),
  })
  .meta({ id: "TenantQuotas" });
