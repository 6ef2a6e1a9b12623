/**
 * The caller's own API keys and tokens: list, create (the secret is in that answer only;
 * the store keeps its hash), revoke. Synchronous, unlike the rest of /v1: an operation
 * would keep the secret in its stored result.
 *
 *   GET    /v1/api-keys       → { api_keys: [ApiKey] }          credentials:read or :write
 *   POST   /v1/api-keys       CreateApiKey → 201 NewApiKey      credentials:write + every tenant scope
 *   DELETE /v1/api-keys/{id}  → 204                             credentials:write
 *   GET    /v1/tokens         → { tokens: [Token] }             credentials:read or :write
 *   POST   /v1/tokens         CreateToken → 201 NewToken        credentials:write (a token: only its own scopes, with an expiry)
 *   DELETE /v1/tokens/{id}    → 204                             credentials:write
 *
 * Every route acts on the caller's tenant: another tenant's id is 404, as an unknown one.
 */
import type { FastifyInstance } from "fastify";
import { SpaceError } from "../../core/errors.ts";
import { createApiKey, listApiKeys, revokeApiKey } from "../../store/api-keys.ts";
import { createToken, listTokens, revokeToken } from "../../store/tokens.ts";
import { forgetCredentials, scopesLacking, tenantScopes, type Principal, type Scope } from "../auth.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, tenantWith, tenantWithAny } from "./native-edge.ts";
import { toApiKey, toToken } from "./native-present.ts";
import { CreateApiKeyBody, CreateTokenBody, CredentialParams } from "./native-schemas.ts";

const READ: readonly Scope[] = ["credentials:read", "credentials:write"];

const expiryField = (message: string) => new SpaceError("invalid_argument", `invalid body: expires_in_s: ${message}`, { details: { field: "expires_in_s" } });

/**
 * When a token made by `p` expires. An API key (the tenant's full power) may make one that
 * never expires; a token must give a lifetime, and what it makes cannot outlive it, so a
 * leaked short-lived token cannot be turned into a lasting one.
 */
function expiryFor(p: Principal, expiresInS: number | undefined): Date | null {
  if (p.kind !== "token") return expiresInS ? new Date(Date.now() + expiresInS * 1000) : null;
  if (!expiresInS) throw expiryField("required when a token creates a token");
  const at = new Date(Date.now() + expiresInS * 1000);
  if (p.expiresAt && at > p.expiresAt) {
    const left = Math.max(0, Math.floor((p.expiresAt.getTime() - Date.now()) / 1000));
    throw expiryField(`must be at most ${left}: a token cannot create one that outlives it (it expires ${p.expiresAt.toISOString()})`);
  }
  return at;
}

export function registerCredentialRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.get("/v1/api-keys", async (req) => {
    const tenantId = await tenantWithAny(deps, req, READ);
    return { api_keys: (await listApiKeys(deps.db, tenantId)).map(toApiKey) };
  });

  app.post("/v1/api-keys", async (req, reply) => {
    const { principal, tenantId } = await tenantWith(deps, req, "credentials:write");
    const body = parse(CreateApiKeyBody, req.body, "body");
    // An API key acts with every tenant scope: only a credential that has them all makes one.
    const lacking = scopesLacking(principal, tenantScopes);
    if (lacking.length) throw new SpaceError("permission_denied", `missing scope ${lacking.join(", ")}: an API key carries every tenant scope, so only a credential with all of them may create one`);
    const { apiKey, plaintext } = await createApiKey(deps.db, { tenantId, ...(body.name && { name: body.name }) });
    deps.log.info({ tenantId, apiKeyId: apiKey.id, by: principal.kind }, "API key created");
    return reply.status(201).send({ ...toApiKey(apiKey), key: plaintext });
  });

  app.delete("/v1/api-keys/:id", async (req, reply) => {
    const { principal, tenantId } = await tenantWith(deps, req, "credentials:write");
    const { id } = parse(CredentialParams, req.params, "path");
    await revokeApiKey(deps.db, tenantId, id);
    forgetCredentials(deps.db);
    deps.log.info({ tenantId, apiKeyId: id, by: principal.kind }, "API key revoked");
    return reply.status(204).send();
  });

  app.get("/v1/tokens", async (req) => {
    const tenantId = await tenantWithAny(deps, req, READ);
    return { tokens: (await listTokens(deps.db, tenantId)).map(toToken) };
  });

  app.post("/v1/tokens", async (req, reply) => {
    const { principal, tenantId } = await tenantWith(deps, req, "credentials:write");
    const body = parse(CreateTokenBody, req.body, "body");
    const lacking = scopesLacking(principal, body.scopes);
    if (lacking.length) throw new SpaceError("permission_denied", `missing scope ${lacking.join(", ")}: a token may grant only scopes it has [${principal.scopes.join(", ")}]`);
    const expiresAt = expiryFor(principal, body.expires_in_s);
    const { token, plaintext } = await createToken(deps.db, { tenantId, scopes: [...new Set(body.scopes)], ...(body.name && { name: body.name }), expiresAt });
    deps.log.info({ tenantId, tokenId: token.id, scopes: token.scopes, by: principal.kind }, "token created");
    return reply.status(201).send({ ...toToken(token), token: plaintext });
  });

  app.delete("/v1/tokens/:id", async (req, reply) => {
    const { principal, tenantId } = await tenantWith(deps, req, "credentials:write");
    const { id } = parse(CredentialParams, req.params, "path");
    await revokeToken(deps.db, tenantId, id);
    forgetCredentials(deps.db);
    deps.log.info({ tenantId, tokenId: id, by: principal.kind }, "token revoked");
    return reply.status(204).send();
  });
}
