/**
 * Volumes on the wire: what a sandbox spec says it mounts, node-api's volume routes (added
 * to node-api.ts's) and the volume content API, which node-api serves in E2B's shape so the
 * control plane forwards it as is (ECW `/volumecontent/{volumeID}/…`, e2b's `Volume`).
 *
 *   PUT    /v1/volumes/:id                 { sizeMib } → NodeVolume (exists = ok; the quota re-applied)
 *   GET    /v1/volumes/:id                 → NodeVolume
 *   DELETE /v1/volumes/:id                 → 204 (absent = ok)
 *   POST   /v1/volumes/:id/send            VolumeSend → VolumeSent (a read-only copy sent to the blob store)
 *   POST   /v1/volumes/:id/receive         VolumeSent → NodeVolume (received from the blob store)
 *   GET    /v1/volumes/:id/dir             ?path&depth → VolumeEntry[]
 *   POST   /v1/volumes/:id/dir             ?path&uid&gid&mode&force → VolumeEntry
 *   GET    /v1/volumes/:id/path            ?path → VolumeEntry
 *   PATCH  /v1/volumes/:id/path            ?path, { uid?, gid?, mode? } → VolumeEntry
 *   DELETE /v1/volumes/:id/path            ?path → 204
 *   GET    /v1/volumes/:id/file            ?path → the bytes
 *   PUT    /v1/volumes/:id/file            ?path&uid&gid&mode&force, the bytes → VolumeEntry
 *
 * Errors are node-api's `{ code, message }`; not_found for a missing path (the SDK's
 * VolumePathNotFoundError).
 */
import { z } from "zod";

export const VolumeId = z.string().regex(/^vol_[a-z0-9]{16}$/, "a volume id");

/** A volume a sandbox mounts, as its node sees it. */
export const SpecVolume = z
  .object({
    volumeId: VolumeId,
    /** Absolute path inside the sandbox. */
    path: z.string().min(2),
    readOnly: z.boolean(),
    /** Its quota, applied when the node makes it. */
    sizeMib: z.number().int().positive(),
  })
  .strict();
export type SpecVolume = z.infer<typeof SpecVolume>;

export const NodeVolumeBody = z.object({ sizeMib: z.number().int().positive() }).strict();

export const NodeVolume = z.object({
  volumeId: z.string(),
  sizeMib: z.number(),
  /** Bytes its files take (the subvolume's qgroup). */
  usedBytes: z.number(),
});
export type NodeVolume = z.infer<typeof NodeVolume>;

/** Sends a volume to the blob store at `key` (encrypted under a fresh data key the node wraps). */
export const VolumeSend = z.object({ key: z.string().regex(/^volumes\/vol_[a-z0-9]{16}\/[a-z0-9-]+\.btrfs$/) }).strict();
export const VolumeSent = z
  .object({
    key: z.string(),
    sizeBytes: z.number().int().nonnegative(),
    sha256: z.string(),
    /** The stream's data key wrapped by the cluster key (absent when the cluster has none). */
    wrappedKey: z.string().optional(),
    sizeMib: z.number().int().positive(),
  })
  .strict();
export type VolumeSent = z.infer<typeof VolumeSent>;

export const VolumeEntryType = z.enum(["unknown", "file", "directory", "symlink"]);

/** E2B's VolumeEntryStat. */
export const VolumeEntry = z.object({
  name: z.string(),
  path: z.string(),
  type: VolumeEntryType,
  size: z.number(),
  mode: z.number(),
  uid: z.number(),
  gid: z.number(),
  atime: z.string(),
  mtime: z.string(),
  ctime: z.string(),
  target: z.string().optional(),
});
export type VolumeEntry = z.infer<typeof VolumeEntry>;

const flag = z.union([z.boolean(), z.enum(["true", "false"]).transform((s) => s === "true")]);
const id32 = z.coerce.number().int().min(0).max(4_294_967_295);

export const VolumePathQuery = z.looseObject({ path: z.string().min(1).max(4096) });
export const VolumeDirQuery = VolumePathQuery.extend({ depth: z.coerce.number().int().min(1).max(32).default(1) });
export const VolumeCreateQuery = VolumePathQuery.extend({
  uid: id32.optional(),
  gid: id32.optional(),
  mode: z.coerce.number().int().min(0).max(0o7777).optional(),
  force: flag.optional(),
});
export type VolumeCreateQuery = z.infer<typeof VolumeCreateQuery>;
export const VolumeMetadataBody = z.looseObject({
  uid: id32.optional(),
  gid: id32.optional(),
  mode: z.number().int().min(0).max(0o7777).optional(),
});
export type VolumeMetadata = z.infer<typeof VolumeMetadataBody>;
