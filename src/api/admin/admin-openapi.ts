/**
 * GET /admin/api/v1/openapi.json: the Admin API as OpenAPI 3.1, generated from the zod
 * schemas its routes validate with (./admin-schemas.ts), as Native's /v1/openapi.json is. Answers
 * whose shape is not a schema here (nodes, warm pools) are documented as JSON objects.
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { VERSION } from "../../core/version.ts";
import { OpenApiSchemas, type Json } from "../openapi-schemas.ts";
import * as S from "./admin-schemas.ts";

const schemas = new OpenApiSchemas();
const hoisted = schemas.hoisted;
const schema = (s: z.ZodType, io: "input" | "output" = "output"): Json => schemas.schema(s, io);

const ErrorBody = z.object({ code: z.number().int(), message: z.string(), reason: z.string() }).passthrough();

const described: Record<number, string> = {
  400: "invalid request (the message names the field)",
  401: "missing or unknown credentials",
  403: "not an admin credential (the node credential may only register and heartbeat)",
  404: "not found",
  409: "conflict (the message says with what)",
  422: "the node call-back failed",
  501: "not available in this process (the message says why)",
};
const errors = (...codes: number[]): Json =>
  Object.fromEntries(codes.map((c) => [String(c), { description: described[c] ?? "error", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } }]));
const json = (status: number, ref?: string, description = "ok"): Json => ({
  [String(status)]: { description, content: { "application/json": { schema: ref ? { $ref: `#/components/schemas/${ref}` } : { type: "object" } } } },
});
const noContent = { "204": { description: "done" } };
const body = (ref: string) => ({ required: true, content: { "application/json": { schema: { $ref: `#/components/schemas/${ref}` } } } });
const pathId = (...names: string[]) => names.map((name) => ({ name, in: "path", required: true, schema: { type: "string", minLength: 1 } }));
const auth = [401, 403];

export function buildAdminOpenApi(): Json {
  const named = {
    Error: schema(ErrorBody),
    Tenant: schema(S.Tenant),
    TenantList: schema(S.TenantList),
    ApiKey: schema(S.ApiKey),
    ApiKeyList: schema(S.ApiKeyList),
    NewApiKey: schema(S.NewApiKey),
    Token: schema(S.Token),
    TokenList: schema(S.TokenList),
    NewToken: schema(S.NewToken),
    CreateTenant: schema(S.TenantBody, "input"),
    CreateApiKey: schema(S.KeyBody, "input"),
    CreateToken: schema(S.TokenBody, "input"),
    RegisterNode: schema(S.RegisterNodeBody, "input"),
    Heartbeat: schema(S.HeartbeatBody, "input"),
    Drain: schema(S.DrainBody, "input"),
    Fence: schema(S.ReasonBody, "input"),
    Reconciled: schema(S.ReconciledBody, "input"),
    Unhealthy: schema(S.UnhealthyBody, "input"),
    WarmPoolSpec: schema(S.PoolBody, "input"),
    TenantQuotas: schema(S.TenantQuotas),
    TenantQuotaOverrides: schema(S.QuotaBody, "input"),
  };
  const tenant = pathId("id");
  const pool = [{ name: "template", in: "path", required: true, schema: schema(S.PoolParams.shape.template, "input") }];
  return {
    openapi: "3.1.0",
    info: { title: "SPACE Admin API", version: VERSION, description: "Tenants, their API keys, tokens and quotas, fleet nodes, warm pools. Every route needs the admin credential (node registration and heartbeat also take the internal token)." },
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } }, schemas: { ...hoisted, ...named } },
    security: [{ bearer: [] }],
    paths: {
      "/admin/api/v1/tenants": {
        get: { summary: "list tenants", responses: { ...json(200, "TenantList"), ...errors(...auth) } },
        post: { summary: "create a tenant", requestBody: body("CreateTenant"), responses: { ...json(201, "Tenant", "created"), ...errors(400, ...auth, 409) } },
      },
      "/admin/api/v1/tenants/{id}": {
        get: { summary: "get a tenant", parameters: tenant, responses: { ...json(200, "Tenant"), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/tenants/{id}/disable": {
        post: { summary: "disable a tenant (its credentials stop working)", parameters: tenant, responses: { ...json(200, "Tenant"), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/tenants/{id}/quotas": {
        get: { summary: "a tenant's quotas and rate limits (enforced limits, its overrides, its usage)", parameters: tenant, responses: { ...json(200, "TenantQuotas"), ...errors(400, ...auth, 404) } },
        put: { summary: "replace a tenant's quota overrides (absent or null = the default)", parameters: tenant, requestBody: body("TenantQuotaOverrides"), responses: { ...json(200, "TenantQuotas"), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/tenants/{id}/keys": {
        get: { summary: "list a tenant's API keys", parameters: tenant, responses: { ...json(200, "ApiKeyList"), ...errors(400, ...auth, 404) } },
        post: { summary: "create an API key (the plaintext is shown once)", parameters: tenant, requestBody: body("CreateApiKey"), responses: { ...json(201, "NewApiKey", "created"), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/tenants/{id}/keys/{childId}": {
        delete: { summary: "revoke an API key", parameters: pathId("id", "childId"), responses: { ...noContent, ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/tenants/{id}/tokens": {
        get: { summary: "list a tenant's tokens", parameters: tenant, responses: { ...json(200, "TokenList"), ...errors(400, ...auth, 404) } },
        post: { summary: "create a scoped token (the plaintext is shown once)", parameters: tenant, requestBody: body("CreateToken"), responses: { ...json(201, "NewToken", "created"), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/tenants/{id}/tokens/{childId}": {
        delete: { summary: "revoke a token", parameters: pathId("id", "childId"), responses: { ...noContent, ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/nodes": {
        get: { summary: "list nodes", responses: { ...json(200), ...errors(...auth) } },
        post: { summary: "register a node (internal token or admin)", requestBody: body("RegisterNode"), responses: { ...json(200, undefined, "registered again"), ...json(201, undefined, "registered"), ...errors(400, ...auth, 409, 422) } },
      },
      "/admin/api/v1/nodes/{id}": {
        get: { summary: "get a node and its residents", parameters: pathId("id"), responses: { ...json(200), ...errors(400, ...auth, 404) } },
        delete: { summary: "forget a node without resident sandboxes", parameters: pathId("id"), responses: { ...noContent, ...errors(400, ...auth, 409) } },
      },
      "/admin/api/v1/nodes/{id}/heartbeat": {
        post: { summary: "publish capacity, environments, templates (internal token or admin)", parameters: pathId("id"), requestBody: body("Heartbeat"), responses: { ...json(200), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/nodes/{id}/sandboxes": {
        get: { summary: "ids the control plane wants on the node", parameters: pathId("id"), responses: { ...json(200), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/nodes/{id}/reconciled": {
        post: { summary: "what the node kept at its start: the node's other records become failed (internal token or admin)", parameters: pathId("id"), requestBody: body("Reconciled"), responses: { ...json(200), ...errors(400, ...auth, 404, 501) } },
      },
      "/admin/api/v1/nodes/{id}/sandboxes/{sandboxId}/unhealthy": {
        post: { summary: "the node's watchdog found a sandbox unhealthy: a running record becomes failed (internal token or admin)", parameters: pathId("id", "sandboxId"), requestBody: body("Unhealthy"), responses: { ...json(200), ...errors(400, ...auth, 404, 501) } },
      },
      "/admin/api/v1/nodes/{id}/drain": {
        post: { summary: "drain: gentle (place nothing new) or forced (evacuate, answers when done)", parameters: pathId("id"), requestBody: body("Drain"), responses: { ...json(200), ...errors(400, ...auth, 404, 501) } },
      },
      "/admin/api/v1/nodes/{id}/fence": {
        post: { summary: "fence: refuse the node's writes, place nothing there", parameters: pathId("id"), requestBody: body("Fence"), responses: { ...json(200), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/nodes/{id}/ready": {
        post: { summary: "clear a drain or fence", parameters: pathId("id"), responses: { ...json(200), ...errors(400, ...auth, 404) } },
      },
      "/admin/api/v1/warm-pools": {
        get: { summary: "list warm pools", responses: { ...json(200), ...errors(...auth) } },
      },
      "/admin/api/v1/warm-pools/{template}": {
        get: { summary: "get a warm pool with its members", parameters: pool, responses: { ...json(200), ...errors(400, ...auth, 404) } },
        put: { summary: "set a warm pool's desired state", parameters: pool, requestBody: body("WarmPoolSpec"), responses: { ...json(200), ...errors(400, ...auth, 404) } },
        delete: { summary: "delete a warm pool (its members drain)", parameters: pool, responses: { ...noContent, ...errors(400, ...auth, 404) } },
      },
    },
  };
}

export function registerAdminOpenApiRoute(app: FastifyInstance): void {
  let doc: Json | undefined;
  app.get("/admin/api/v1/openapi.json", async () => (doc ??= buildAdminOpenApi()));
}
