/**
 * `volume.create` and `volume.delete` (docs/volumes.md) through the shared volume service
 * (the one ECW's `/volumes` uses). The volume id is chosen at admission, so the operation
 * names its target from the first answer. Re-runnable: a create finds the volume an
 * interrupted attempt made under that id; a re-run delete of a volume already gone is done.
 */
import { SpaceError, unimplemented } from "../core/errors.ts";
import type { TenantId } from "../core/ids.ts";
import type { SandboxVolumes } from "../sandboxes/volume-service.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";
import { readRequest } from "./operation-kind.ts";
import { parseVolumeTarget } from "./requests.ts";
import { toNativeVolume, type VolumeDeleted } from "./results.ts";

function volumesOf(deps: HandlerDeps): SandboxVolumes {
  const v = deps.sandboxes.volumes;
  if (!v) throw unimplemented("volumes need the store-backed sandbox service");
  return v;
}

const isNotFound = (e: unknown) => e instanceof SpaceError && e.code === "not_found";

export function volumeCreate(deps: HandlerDeps): OperationHandler {
  return async ({ op }) => {
    const body = readRequest("volume.create", op.request);
    const id = parseVolumeTarget(op.targetId);
    const tenantId = op.tenantId as TenantId;
    const vols = volumesOf(deps);
    const prev = await vols.get(tenantId, id).catch((e: unknown) => {
      if (isNotFound(e)) return undefined;
      throw e;
    });
    // The result carries no content token: operations are readable with any read scope; GET /v1/volumes/{id} (volumes:read) hands it out.
    if (prev) return toNativeVolume(prev);
    return toNativeVolume(await vols.create(tenantId, body.name, { id, ...(body.size_mib !== undefined ? { sizeMib: body.size_mib } : {}) }));
  };
}

export function volumeDelete(deps: HandlerDeps): OperationHandler {
  return async ({ op, signal }): Promise<VolumeDeleted> => {
    const { volume_id: id } = readRequest("volume.delete", op.request);
    try {
      await volumesOf(deps).delete(op.tenantId as TenantId, id, signal);
    } catch (e) {
      // The previous claimer deleted it and died before recording the outcome.
      if (!(op.claimCount > 1 && isNotFound(e))) throw e;
    }
    return { id, deleted: true };
  };
}
