/** `POST /sandboxes` (SDK <= 2.50, default timeout 15 s) and `POST /v2/sandboxes` (300 s). */
import type { FastifyInstance } from "fastify";
import { invalid } from "../../core/errors.ts";
import type { CreateInput, ResourceRequest } from "../sandboxes/service.ts";
import { parse, tenantOf } from "./http.ts";
import { toSandbox } from "./present.ts";
import { NewSandbox, RESOURCES_METADATA_KEY, SpaceResources } from "./schemas.ts";
import type { EcwDeps } from "./routes.ts";

export function registerSandboxCreate(app: FastifyInstance, deps: EcwDeps) {
  for (const [path, v] of [["/sandboxes", 1], ["/v2/sandboxes", 2]] as const) {
    app.post(path, async (req, reply) => {
      const tenant = tenantOf(req);
      const body = parse(NewSandbox, req.body, "sandbox create body");
      const input = toCreateInput(body, v);
      // A caller that goes away does not abort a create half-way: the service
      // finishes or cleans up, so no half state is left behind.
      const rec = await deps.sandboxes.create(tenant, input, AbortSignal.timeout(600_000));
      return reply.code(201).send(toSandbox(rec, { domain: deps.sandboxDomain }));
    });
  }
}

export function toCreateInput(body: NewSandbox, version: 1 | 2): CreateInput {
  const metadata = body.metadata ?? {};
  return {
    template: body.templateID,
    metadata,
    envVars: body.envVars ?? {},
    timeoutSec: body.timeout ?? (version === 1 ? 15 : 300),
    // SDK <= 2.50 sends `secure` (default true); 2.51 sends nothing and expects tokens.
    secure: body.secure ?? version === 2,
    allowInternetAccess: body.allow_internet_access ?? true,
    network: body.network ? { ...body.network } : null,
    onTimeout: body.autoPause ? "pause" : "kill",
    autoResume: body.autoResume?.enabled ?? false,
    resources: parseResources(metadata[RESOURCES_METADATA_KEY]),
  };
}

export function parseResources(raw: string | undefined): ResourceRequest {
  if (raw === undefined) return {};
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw invalid(`metadata '${RESOURCES_METADATA_KEY}' must be JSON like {"vcpu":2,"memory_mib":1024,"disk_mib":4096} (got ${raw.slice(0, 100)})`, {
      field: RESOURCES_METADATA_KEY,
    });
  }
  const r = parse(SpaceResources, json, `metadata '${RESOURCES_METADATA_KEY}'`);
  return {
    ...(r.vcpu !== undefined ? { vcpu: r.vcpu } : {}),
    ...(r.memory_mib !== undefined ? { memoryMib: r.memory_mib } : {}),
    ...(r.disk_mib !== undefined ? { diskMib: r.disk_mib } : {}),
  };
}
