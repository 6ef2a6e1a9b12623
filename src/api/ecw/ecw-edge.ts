/**
 * ECW edge helpers: body/query validation with zod, the error body the SDK reads
 * (`{"code":<status>,"message"}`), and API-key authentication to a tenant.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { INTERNAL_MESSAGE, SpaceError, apiHttpStatus, invalid, publicMessage, retryHeadersOf } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { TenantId } from "../../core/ids.ts";
import type { ApiKeyAuth } from "../../sandboxes/model.ts";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the ECW auth hook. */
    ecwTenant?: TenantId;
  }
}

export { parseInput as parse } from "../../core/validate.ts";

export function tenantOf(req: FastifyRequest): TenantId {
  if (!req.ecwTenant) throw new SpaceError("unauthenticated", "Invalid API key");
  return req.ecwTenant;
}

export function sendEcwError(reply: FastifyReply, status: number, message: string) {
  return reply.code(status).type("application/json").send({ code: status, message });
}

/** The raw API key of an ECW request (the rate limiter keys its per-key bucket by its hash). */
export function apiKeyOf(req: FastifyRequest): string | null {
  const raw = req.headers["x-api-key"];
  return (Array.isArray(raw) ? raw[0] : raw) ?? null;
}

/**
 * Installs, in an encapsulated scope: tolerant JSON parsing, auth, the ECW error body.
 * `capacityRetryAfterS`: the `Retry-After` of a 429 for a full cluster (SPACE_CAPACITY_RETRY_AFTER_S).
 * `auth` null: the scope authenticates its own way (the volume content API's volume tokens).
 */
export function installEcwEdge(scope: FastifyInstance, auth: ApiKeyAuth | null, log: Logger, capacityRetryAfterS = 5): void {
  // The SDK sends chunked JSON, sometimes empty bodies with a JSON content type.
  scope.removeContentTypeParser("application/json");
  scope.addContentTypeParser("application/json", { parseAs: "string" }, (_req, body, done) => {
    const text = typeof body === "string" ? body : body.toString("utf8");
    if (text.trim() === "") return done(null, {});
    try {
      done(null, JSON.parse(text));
    } catch (e) {
      done(invalid(`request body is not valid JSON: ${(e as Error).message}`) as unknown as Error, undefined);
    }
  });

  if (auth) scope.addHook("onRequest", async (req, reply) => {
    const raw = req.headers["x-api-key"];
    const key = Array.isArray(raw) ? raw[0] : raw;
    const tenant = key ? await auth.tenantForApiKey(key) : null;
    if (!tenant) return sendEcwError(reply, 401, "Invalid API key");
    req.ecwTenant = tenant;
  });

  scope.setErrorHandler((error: FastifyError | SpaceError | Error, req, reply) => {
    if (error instanceof SpaceError) {
      const status = apiHttpStatus(error.code);
      if (status >= 500 && error.code !== "unimplemented") log.error({ err: error, url: req.url }, "ECW request failed");
      else req.log.debug({ code: error.code, msg: error.message }, "ECW request refused");
      void reply.headers(retryHeadersOf(error, capacityRetryAfterS));
      return sendEcwError(reply, status, publicMessage(error));
    }
    const status = (error as FastifyError).statusCode;
    if (typeof status === "number" && status >= 400 && status < 500) return sendEcwError(reply, status, error.message);
    log.error({ err: error, url: req.url }, "ECW request failed unexpectedly");
    return sendEcwError(reply, 500, INTERNAL_MESSAGE);
  });
}
