/**
 * /v1/volumes (docs/volumes.md): the shared volume service on the Native wire. Create and
 * delete are operations (202, Idempotency-Key); reads are synchronous. Scopes
 * `volumes:read`, `volumes:write`.
 *
 *   POST   /v1/volumes       CreateVolume → 202 Operation `volume.create` (target volumes/<id>)
 *   GET    /v1/volumes       → { volumes: [Volume] }
 *   GET    /v1/volumes/{id}  → Volume with its content token and the sandboxes holding it (an id or a name)
 *   DELETE /v1/volumes/{id}  → 202 Operation `volume.delete`; 409 now while a sandbox holds it
 */
import type { FastifyInstance } from "fastify";
import { SpaceError, conflict, notFound, unimplemented } from "../../core/errors.ts";
import type { TenantId } from "../../core/ids.ts";
import { newVolumeId } from "../../store/volumes.ts";
import { validateVolumeMounts, validateVolumeName, type SandboxVolumes, type VolumeMountRequest } from "../../sandboxes/volume-service.ts";
import { volumeTarget } from "../../operations/requests.ts";
import { toNativeVolume } from "../../operations/results.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, submit, tenantWith } from "./native-edge.ts";
import { CreateVolumeBody, VolumeIdParams } from "./native-schemas.ts";

const VOLUME_DEADLINE_MS = 10 * 60_000;

export function volumesOf(deps: NativeDeps): SandboxVolumes {
  const v = deps.sandboxes.volumes;
  if (!v) throw unimplemented("volumes need the store-backed sandbox service");
  return v;
}

/**
 * A Native create's mounts, checked before anything is queued: shapes (400 naming the
 * value) and that each volume is the caller's (404 naming it). Whether another sandbox
 * holds one is decided by the create itself (409 as the operation's failure).
 */
export async function admitMounts(deps: NativeDeps, tenantId: TenantId, mounts: readonly VolumeMountRequest[]): Promise<void> {
  if (!mounts.length) return;
  const vols = volumesOf(deps);
  validateVolumeMounts(mounts);
  const names = new Set((await vols.list(tenantId)).map((v) => v.name));
  const missing = mounts.find((m) => !names.has(m.name));
  if (missing) throw notFound(`volume '${missing.name}' not found`);
}

export function registerVolumeRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.post("/v1/volumes", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "volumes:write");
    const body = parse(CreateVolumeBody, req.body, "body");
    validateVolumeName(body.name);
    const vols = volumesOf(deps);
    return submit(deps, req, reply, {
      tenantId,
      kind: "volume.create",
      target: volumeTarget(newVolumeId()),
      request: body,
      deadlineMs: VOLUME_DEADLINE_MS,
      // A name the tenant has is a 409 now, not a failed operation later (a race still fails the operation).
      admit: async () => {
        const taken = (await vols.list(tenantId)).some((v) => v.name === body.name);
        if (taken) throw new SpaceError("already_exists", `volume '${body.name}' already exists`);
      },
    });
  });

  app.get("/v1/volumes", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "volumes:read");
    return { volumes: (await volumesOf(deps).list(tenantId)).map((v) => toNativeVolume(v)) };
  });

  app.get("/v1/volumes/:id", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "volumes:read");
    const { id } = parse(VolumeIdParams, req.params, "path");
    const vols = volumesOf(deps);
    const v = await vols.find(tenantId, id);
    return toNativeVolume(v, { token: true, mountedBy: await vols.holders(v.id) });
  });

  app.delete("/v1/volumes/:id", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "volumes:write");
    const { id } = parse(VolumeIdParams, req.params, "path");
    const vols = volumesOf(deps);
    return submit(deps, req, reply, {
      tenantId,
      kind: "volume.delete",
      target: volumeTarget(id),
      request: { volume_id: id },
      deadlineMs: VOLUME_DEADLINE_MS,
      // 404 for another tenant's or a name (the id names it, so a retried delete replays); 409 while in use.
      admit: async () => {
        const v = await vols.get(tenantId, id);
        const holders = await vols.holders(v.id);
        if (holders.length) throw conflict(`volume ${id} is in use by sandbox${holders.length > 1 ? "es" : ""} ${holders.map((h) => h.sandboxId).join(", ")}; kill them first`);
      },
    });
  });
}
