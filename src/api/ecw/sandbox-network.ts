/** `PUT /sandboxes/{id}/network`: replaces the whole egress policy. */
import type { FastifyInstance } from "fastify";
import { parse, tenantOf } from "./ecw-edge.ts";
import { IdParams, NetworkUpdateBody } from "./ecw-schemas.ts";
import type { EcwDeps } from "./ecw-routes.ts";

export function registerSandboxNetwork(app: FastifyInstance, deps: EcwDeps) {
  app.put("/sandboxes/:sandboxID/network", async (req, reply) => {
    const { sandboxID } = parse(IdParams, req.params, "path");
    const { allow_internet_access, ...network } = parse(NetworkUpdateBody, req.body, "network body");
    await deps.sandboxes.updateNetwork(tenantOf(req), sandboxID, network, allow_internet_access);
    return reply.code(204).send();
  });
}
