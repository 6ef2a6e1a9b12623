/** `POST /sandboxes` (SDK <= 2.50, default timeout 15 s) and `POST /v2/sandboxes` (300 s). */
import { createHash } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { conflict, invalid } from "../../core/errors.ts";
import type { SandboxId, TenantId } from "../../core/ids.ts";
import { isLive, type SandboxRecord } from "../../sandboxes/model.ts";
import type { CreateInput, ResourceRequest } from "../../sandboxes/service.ts";
import { parseMetadataJson } from "../../sandboxes/create-input.ts";
import { inChildSpan } from "../../core/tracing.ts";
import { idempotencyKey } from "../idempotency-key.ts";
import { apiKeyOf, parse, tenantOf } from "./ecw-edge.ts";
import { toSandbox } from "./ecw-present.ts";
import { fromEcwMount } from "./volume-mounts.ts";
import { NewSandbox, RESOURCES_METADATA_KEY, SpaceResources } from "./ecw-schemas.ts";
import type { EcwDeps } from "./ecw-routes.ts";

export function registerSandboxCreate(app: FastifyInstance, deps: EcwDeps) {
  for (const [path, v] of [["/sandboxes", 1], ["/v2/sandboxes", 2]] as const) {
    app.post(path, async (req, reply) => {
      const tenant = tenantOf(req);
      const body = parse(NewSandbox, req.body, "sandbox create body");
      const input = toCreateInput(body, v);
      const key = idempotencyKey(req);
      if (key !== null) {
        // A retried create (the SDK reuses its Idempotency-Key) answers with the live
        // sandbox an earlier attempt made. The key names the sandbox ids it may use (no
        // extra state): an attempt whose sandbox failed or ended moves on to the next id.
        for (let attempt = 0; input.id === undefined; attempt++) {
          if (attempt === MAX_KEY_ATTEMPTS) throw conflict(`Idempotency-Key ${JSON.stringify(key)} was used ${attempt} times; use a new key`);
          const id = idempotentSandboxId(tenant, key, attempt);
          const prior = await inChildSpan("api.idempotency", "api", {}, () => settled(deps, tenant, id));
          if (!prior) input.id = id;
          else if (isLive(prior.state)) return reply.code(201).send(toSandbox(prior, { domain: deps.sandboxDomain }));
        }
      }
      // After the replay check: answering a retried create takes no token.
      if (deps.limiter) await inChildSpan("api.rate-limit", "api", {}, () => deps.limiter!.admit(tenant, apiKeyOf(req)));
      // A caller that goes away does not abort a create half-way: the service
      // finishes or cleans up, so no half state is left behind.
      const rec = await deps.sandboxes.create(tenant, input, AbortSignal.timeout(600_000));
      return reply.code(201).send(toSandbox(rec, { domain: deps.sandboxDomain }));
    });
  }
}

const MAX_KEY_ATTEMPTS = 100;

/** The sandbox id of an Idempotency-Key's nth attempt: `[a-z0-9]{20}` from sha256(tenant, key, n). */
export function idempotentSandboxId(tenant: TenantId, key: string, attempt: number): SandboxId {
  const h = createHash("sha256").update(`${tenant}\0${key}\0${attempt}`).digest();
  let id = "";
  for (let i = 0; i < 20; i++) id += ID_ALPHABET[h[i]! % ID_ALPHABET.length];
  return id as SandboxId;
}
const ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** The sandbox under `id`, once past `creating` (a concurrent first attempt is waited for). */
function settled(deps: EcwDeps, tenant: TenantId, id: SandboxId): Promise<SandboxRecord | null> {
  return deps.sandboxes.awaitLeaving(tenant, id, ["creating"], 600_000);
}

export function toCreateInput(body: NewSandbox, version: 1 | 2): CreateInput {
  const metadata = body.metadata ?? {};
  // As E2B: a filesystem-only snapshot has no memory to wake by traffic; it is resumed by an explicit connect.
  if (body.autoPauseMemory === false && body.autoResume?.enabled) {
    throw invalid("autoPauseMemory: false cannot be combined with autoResume: a filesystem-only pause is resumed by connect", { field: "autoPauseMemory" });
  }
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
    // `autoPauseMemory: false` (SDK `onTimeout: { action: "pause", keepMemory: false }`): the timeout keeps the disk only.
    ...(body.autoPause && body.autoPauseMemory === false ? { pauseKind: "disk" as const } : {}),
    autoResume: body.autoResume?.enabled ?? false,
    resources: parseResources(metadata[RESOURCES_METADATA_KEY]),
    ...(body.volumeMounts?.length ? { volumeMounts: body.volumeMounts.map(fromEcwMount) } : {}),
  };
}


export function parseResources(raw: string | undefined): ResourceRequest {
  if (raw === undefined) return {};
  const json = parseMetadataJson(RESOURCES_METADATA_KEY, raw, '{"vcpu":2,"memory_mib":1024,"disk_mib":4096}');
  const r = parse(SpaceResources, json, `metadata '${RESOURCES_METADATA_KEY}'`);
  return {
    ...(r.vcpu !== undefined ? { vcpu: r.vcpu } : {}),
    ...(r.memory_mib !== undefined ? { memoryMib: r.memory_mib } : {}),
    ...(r.disk_mib !== undefined ? { diskMib: r.disk_mib } : {}),
  };
}
