/**
 * The HTTP edge of the error taxonomy: every API surface answers errors as
 * `{"code": <HTTP status>, "message": "...", "reason": "<taxonomy code>"}` — the shape the
 * E2B SDK reads (it looks at the numeric `code`), with the taxonomy code beside it.
 */
import type { FastifyError, FastifyInstance } from "fastify";
import { ZodError } from "zod";
import { fromZod } from "../core/validate.ts";
import { SpaceError, httpStatus } from "../core/errors.ts";

export interface ErrorBody {
  code: number;
  message: string;
  reason: string;
}

export function toErrorBody(e: SpaceError): ErrorBody {
  return { code: httpStatus[e.code], message: e.message, reason: e.code };
}

export { fromZod, parseInput } from "../core/validate.ts";

export function installErrorHandler(app: FastifyInstance): void {
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
    void reply.status(status).send({ ...body, code: status });
  });
  app.setNotFoundHandler((req, reply) => {
    void reply.status(404).send({ code: 404, message: `no route for ${req.method} ${req.url.split("?")[0]}`, reason: "not_found" });
  });
}
