/**
 * The Native API (`/v1`): SPACE's asynchronous API. Every mutation is a durable public
 * operation answered with 202 (behaviours.md A); reads are synchronous, and so is managing
 * the caller's own keys and tokens (credentials.ts: the secret is in the answer only).
 */
import type { FastifyInstance } from "fastify";
import type { NativeDeps } from "./deps.ts";
import { registerSandboxRoutes } from "./sandboxes.ts";
import { registerLifecycleRoutes } from "./native-sandbox-lifecycle.ts";
import { registerCommandRoutes } from "./commands.ts";
import { registerCommandOutputRoutes } from "./command-output.ts";
import { registerOperationRoutes } from "./operations.ts";
import { registerOpenApiRoute } from "./native-openapi.ts";
import { registerTemplateRoutes } from "./native-templates.ts";
import { registerVolumeRoutes } from "./native-volumes.ts";
import { registerCredentialRoutes } from "./credentials.ts";

export type { NativeDeps };

export function registerNativeRoutes(app: FastifyInstance, deps: NativeDeps): void {
  registerSandboxRoutes(app, deps);
  registerLifecycleRoutes(app, deps);
  registerCommandRoutes(app, deps);
  registerCommandOutputRoutes(app, deps);
  registerOperationRoutes(app, deps);
  registerTemplateRoutes(app, deps);
  registerVolumeRoutes(app, deps);
  registerCredentialRoutes(app, deps);
  registerOpenApiRoute(app);
}
