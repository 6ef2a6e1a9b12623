/**
 * The HTTP edge of the error taxonomy: every API surface answers errors as
 * `{"code": <HTTP status>, "message": "...", "reason": "<taxonomy code>"}` — the shape the
 * E2B SDK reads (it looks at the numeric `code`), with the taxonomy code beside it.
 */
import type { FastifyError, FastifyInstance } from "fastify";
import { ZodError } from "zod";
import { fromZod } from "../core/validate.ts";
import { SpaceError, apiHttpStatus, publicMessage, retryHeadersOf } from "../core/errors.ts";

export interface ErrorBody {
  code: number;
  message: string;
  reason: string;
}

export function toErrorBody(e: SpaceError): ErrorBody {
  return { code: apiHttpStatus(e.code), message: publicMessage(e), reason: e.code };
}

export { fromZod, parseInput } from "../core/validate.ts";

/** `capacityRetryAfterS`: the `Retry-After` of a 429 for a full cluster (SPACE_CAPACITY_RETRY_AFTER_S). */
export function installErrorHandler(app: FastifyInstance, capacityRetryAfterS = 5): void {
  app.setErrorHandler((err: FastifyError | Error, req, reply) => {
    // Fastify's own 4xx (bad JSON, wrong content type, body too large) keep their status.
    const frameworkStatus =
      !(err instanceof SpaceError) && "statusCode" in err && typeof err.statusCode === "number" && err.statusCode < 500
        ? err.statusCode
        : undefined;
    const e =
      err instanceof ZodError
        ? fromZod(err, "request")
        : frameworkStatus !== undefined
          ? new SpaceError("invalid_argument", err.message)
          : SpaceError.from(err);
    const body = toErrorBody(e);
    const status = frameworkStatus ?? body.code;
    if (status >= 500) req.log.error({ err: e, cause: e.cause }, "request failed");
    else req.log.info({ reason: e.code, msg: e.message }, "request refused");
    if (frameworkStatus === undefined) void reply.headers(retryHeadersOf(e, capacityRetryAfterS));
    void reply.status(status).send({ ...body, code: status });
  });
  // A path that exists with other methods is 405 with Allow (RFC 9110 §15.5.6), not 404.
  const routes: Array<{ pattern: RegExp; methods: string[] }> = [];
  app.addHook("onRoute", (r) => {
    const methods = (Array.isArray(r.method) ? r.method : [r.method]).map(String);
    if (methods.includes("GET")) methods.push("HEAD");
    routes.push({ pattern: routePattern(r.url), methods });
  });
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split("?")[0] ?? "/";
    const allowed = [...new Set(routes.filter((r) => r.pattern.test(path)).flatMap((r) => r.methods))].sort();
    if (allowed.length > 0 && !allowed.includes(req.method)) {
      void reply
        .status(405)
        .header("allow", allowed.join(", "))
        .send({ code: 405, message: `method ${req.method} is not allowed on ${path}; allowed: ${allowed.join(", ")}`, reason: "invalid_argument" });
      return;
    }
    void reply.status(404).send({ code: 404, message: `no route for ${req.method} ${path}`, reason: "not_found" });
  });
}

/** A route url (`/sandboxes/:sandboxID`, `/files/*`) as a regular expression over request paths. */
function routePattern(url: string): RegExp {
  const parts = url.split("/").map((seg) => {
    if (seg === "*") return ".*";
    if (seg.startsWith(":")) return "[^/]+";
    return seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  });
  return new RegExp(`^${parts.join("/")}/?$`);
}
