/**
 * node-api wire of snapshots (added to node-api.ts's routes). The one SnapshotDescriptor:
 * what a node hands back for a capture and the control plane keeps to restore it. Its
 * `kind` says what it holds: `full` (memory checkpoint + disk: a restore resumes the
 * processes) or `disk` (the disk only, E2B's filesystem-only pause: a restore boots the
 * sandbox fresh from it, like a start after a stop).
 *
 *   POST   /v1/sandboxes/:id/suspend     SnapshotRequest → SnapshotDescriptor (sandbox gone from the node)
 *   POST   /v1/sandboxes/:id/capture     SnapshotRequest → SnapshotDescriptor (sandbox keeps running)
 *   POST   /v1/restores                  RestoreRequest  → SandboxStatus (201; a new id for forks)
 *   POST   /v1/snapshots/:snapshotId/publish  → SnapshotDescriptor (a local copy's parts put in the blob store: durable)
 *   GET    /v1/snapshots                 → { snapshots: { snapshotId, createdAt }[] } (local copies)
 *   DELETE /v1/snapshots/:snapshotId     → 204 (local copy freed; absent = ok)
 */
import { z } from "zod";
import { SandboxIdWire, SandboxSpec } from "./node-api.ts";

/** Bound of `restoreAs`: the most forks one request makes. */
export const RESTORE_AS_MAX = 20;

export const SnapshotId = z.string().regex(/^sn_[a-z0-9]{16}$/, "a snapshot id");

/** `full`: memory checkpoint + disk; `disk`: the disk only (no CRIU image). */
export const SnapshotKind = z.enum(["full", "disk"]);
export type SnapshotKind = z.infer<typeof SnapshotKind>;

export const SnapshotRequest = z
  .object({
    snapshotId: SnapshotId,
    /** Publish the parts to the blob store before answering (durable); false: the local copy only (publish it later). */
    upload: z.boolean().default(true),
    kind: SnapshotKind.default("full"),
    /**
     * A capture only (forks): the sandbox ids the caller will restore it as, here. Their
     * disks and network slots are set up while the memory is dumped, and kept for
     * SPACE_NODE_SLOT_KEEP_MS for those restores to take (a restore elsewhere lets them go).
     */
    restoreAs: z.array(SandboxIdWire).max(RESTORE_AS_MAX).default([]),
  })
  .strict();
export type SnapshotRequest = z.infer<typeof SnapshotRequest>;

export const SnapshotPartInfo = z.object({
  kind: z.enum(["memory", "disk"]),
  key: z.string(),
  sizeBytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export type SnapshotPartInfo = z.infer<typeof SnapshotPartInfo>;

export const SnapshotDescriptor = z.object({
  snapshotId: SnapshotId,
  sourceSandboxId: z.string(),
  template: z.string(),
  /** Absent in descriptors recorded before disk-only snapshots existed: those are full. */
  kind: SnapshotKind.default("full"),
  /** btrfs identity (received uuid, else uuid) of the disk stream's parent subvolume. */
  parentUuid: z.string(),
  parts: z.array(SnapshotPartInfo),
  /** Data key wrapped by the cluster key; absent = parts are plaintext. */
  wrappedKey: z.string().optional(),
  sizeBytes: z.number().int().nonnegative(),
  /**
   * Under simple quotas, the captured disk's whole size (MiB) as its node measured it: what
   * a disk restored from it starts from. A node receiving the snapshot uses it instead of
   * walking the received tree; absent = measure it.
   */
  diskBaseMib: z.number().int().nonnegative().optional(),
  /** ms spent per phase, for benchmarks. */
  timings: z.record(z.string(), z.number()).default({}),
});
export type SnapshotDescriptor = z.infer<typeof SnapshotDescriptor>;

export const RestoreRequest = z.object({ spec: SandboxSpec, snapshot: SnapshotDescriptor }).strict();
export type RestoreRequest = z.infer<typeof RestoreRequest>;
