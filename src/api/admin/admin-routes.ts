/**
 * Admin API (`/admin/api/v1`): tenants, their API keys and scoped tokens. Nodes are
 * registered here too (see nodes.ts). Every route requires the admin credential.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { TenantId } from "../../core/ids.ts";
import type { Db } from "../../store/db.ts";
import { createTenant, getTenant, listTenants, setTenantDisabled } from "../../store/tenants.ts";
import { createApiKey, listApiKeys, revokeApiKey } from "../../store/api-keys.ts";
import { createToken, listTokens, revokeToken } from "../../store/tokens.ts";
import { authenticateBearer, bearerOf, forgetCredentials, requireScope, type Principal } from "../auth.ts";
import { parseInput as parse } from "../error-body.ts";
import { registerAdminOpenApiRoute } from "./admin-openapi.ts";
import { ChildParams, KeyBody, TenantBody, TenantParams, TokenBody } from "./admin-schemas.ts";

export interface AdminDeps {
  db: Db;
  adminToken: string;
}

export function registerAdminRoutes(app: FastifyInstance, deps: AdminDeps): void {
  const admin = async (req: FastifyRequest): Promise<Principal> => {
    const p = await authenticateBearer(deps.db, bearerOf(req), deps.adminToken);
    requireScope(p, "admin");
    return p;
  };
  const base = "/admin/api/v1";
  registerAdminOpenApiRoute(app);

  app.get(`${base}/tenants`, async (req) => {
    await admin(req);
    return { tenants: await listTenants(deps.db) };
  });
  app.post(`${base}/tenants`, async (req, reply) => {
    await admin(req);
    const body = parse(TenantBody, req.body, "body");
    return reply.status(201).send(await createTenant(deps.db, body));
  });
  app.get(`${base}/tenants/:id`, async (req) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    return getTenant(deps.db, id as TenantId);
  });
  app.post(`${base}/tenants/:id/disable`, async (req) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    const t = await setTenantDisabled(deps.db, id as TenantId, true);
    forgetCredentials(deps.db);
    return t;
  });
  app.post(`${base}/tenants/:id/keys`, async (req, reply) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    const body = parse(KeyBody, req.body, "body");
    await getTenant(deps.db, id as TenantId);
    const { apiKey, plaintext } = await createApiKey(deps.db, { tenantId: id as TenantId, ...(body.name && { name: body.name }) });
    // The plaintext is shown once; only its hash is stored.
    return reply.status(201).send({ ...apiKey, key: plaintext });
  });
  app.get(`${base}/tenants/:id/keys`, async (req) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    return { keys: await listApiKeys(deps.db, id as TenantId) };
  });
  app.delete(`${base}/tenants/:id/keys/:childId`, async (req, reply) => {
    await admin(req);
    const { id, childId } = parse(ChildParams, req.params, "path");
    await revokeApiKey(deps.db, id as TenantId, childId);
    forgetCredentials(deps.db);
    return reply.status(204).send();
  });
  app.post(`${base}/tenants/:id/tokens`, async (req, reply) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    const body = parse(TokenBody, req.body, "body");
    await getTenant(deps.db, id as TenantId);
    const { token, plaintext } = await createToken(deps.db, {
      tenantId: id as TenantId,
      scopes: body.scopes,
      ...(body.name && { name: body.name }),
      expiresAt: body.expires_in_s ? new Date(Date.now() + body.expires_in_s * 1000) : null,
    });
    return reply.status(201).send({ ...token, token: plaintext });
  });
  app.get(`${base}/tenants/:id/tokens`, async (req) => {
    await admin(req);
    const { id } = parse(TenantParams, req.params, "path");
    return { tokens: await listTokens(deps.db, id as TenantId) };
  });
  app.delete(`${base}/tenants/:id/tokens/:childId`, async (req, reply) => {
    await admin(req);
    const { id, childId } = parse(ChildParams, req.params, "path");
    await revokeToken(deps.db, id as TenantId, childId);
    forgetCredentials(deps.db);
    return reply.status(204).send();
  });
}
