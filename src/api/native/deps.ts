/**
 * What the Native API needs from the process that mounts it.
 */
import type { FastifyRequest } from "fastify";
import type { Logger } from "../../core/log.ts";
import type { Db } from "../../store/db.ts";
import type { Principal } from "../auth.ts";
import type { SandboxService } from "../../sandboxes/service.ts";
import type { BuildCoordinator } from "../../templates/build-coordinator.ts";
import type { CreateRateLimiter } from "../rate-limit.ts";

export interface NativeDeps {
  db: Db;
  /** THE sandbox service (shared with ECW). */
  sandboxes: SandboxService;
  /**
   * Who is calling: a scoped token, an API key as bearer, or the admin token; throws
   * `unauthenticated`. Wire as `(req) => authenticateBearer(db, bearerOf(req), config.SPACE_ADMIN_TOKEN)`.
   */
  authenticate(req: FastifyRequest): Promise<Principal>;
  log: Logger;
  /** Deadline of a create operation from enqueue (default 30 min). */
  createDeadlineMs?: number;
  /** Deadline of other operations (default 30 min; commands add their timeout_s). */
  operationDeadlineMs?: number;
  /** Template builds (the process's BuildCoordinator); absent = builds are refused. */
  builds?: BuildCoordinator;
  /** Create rate limits (per tenant, per credential); absent = none. */
  limiter?: CreateRateLimiter;
}
