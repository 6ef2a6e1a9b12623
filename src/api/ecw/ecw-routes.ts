/**
 * The E2B-compatible control-plane REST surface ("ECW", e2b-wire.md §2), registered in
 * its own Fastify scope (its own error body, JSON parser and X-API-KEY auth).
 */
import type { FastifyInstance } from "fastify";
import type { Logger } from "../../core/log.ts";
import type { ApiKeyAuth } from "../../sandboxes/model.ts";
import type { SandboxService } from "../../sandboxes/service.ts";
import type { CreateRateLimiter } from "../rate-limit.ts";
import { installEcwEdge } from "./ecw-edge.ts";
import { registerSandboxCreate } from "./ecw-sandbox-create.ts";
import { registerSandboxLifecycle } from "./ecw-sandbox-lifecycle.ts";
import { registerSandboxNetwork } from "./sandbox-network.ts";
import { registerSandboxRead } from "./sandbox-read.ts";
import { registerSandboxSnapshots } from "./sandbox-snapshots.ts";
import { registerVolumeContentRoutes, registerVolumeRoutes } from "./ecw-volumes.ts";

export interface EcwDeps {
  sandboxes: SandboxService;
  apiKeys: ApiKeyAuth;
  /** SPACE_SANDBOX_DOMAIN ("" → null): returned as `domain`, used by getHost(). */
  sandboxDomain: string | null;
  log: Logger;
  /** Create rate limits (per tenant, per API key); absent = none. */
  limiter?: CreateRateLimiter;
  /** SPACE_CAPACITY_RETRY_AFTER_S: `Retry-After` of a 429 for a full cluster. */
  capacityRetryAfterS?: number;
  /** The `domain` volume answers carry (ecw-volumes.ts); undefined = none. */
  volumeDomain?: string | undefined;
}

export async function registerEcwRoutes(app: FastifyInstance, deps: EcwDeps): Promise<void> {
  // Volumes live in the store: a service without one (unit tests' memory repo) has no volume routes.
  const volumes = deps.sandboxes.volumes;
  await app.register(async (scope) => {
    installEcwEdge(scope, deps.apiKeys, deps.log, deps.capacityRetryAfterS);
    registerSandboxCreate(scope, deps);
    registerSandboxRead(scope, deps);
    registerSandboxLifecycle(scope, deps);
    registerSandboxNetwork(scope, deps);
    registerSandboxSnapshots(scope, deps);
    if (volumes) registerVolumeRoutes(scope, { volumes, volumeDomain: deps.volumeDomain });
  });
  if (volumes) await registerVolumeContentRoutes(app, { volumes, volumeDomain: deps.volumeDomain, log: deps.log });
}
