/**
 * What every system of the sandbox service shares (creation, lifecycle, forks,
 * evacuation, network, expiry): the ports, the event bus, and the node steps more than
 * one system takes (the node spec of a sandbox, a placement for a restore, a restore
 * that holds its snapshot, dropping snapshots).
 */
import type { EventEmitter } from "node:events";
import type { Logger } from "../core/log.ts";
import type { SandboxLifecycleMetrics } from "../core/metrics.ts";
import { SpaceError, notFound } from "../core/errors.ts";
import type { SandboxId, TenantId } from "../core/ids.ts";
import type { SandboxSpec } from "../contract/node-api.ts";
import type { SandboxRef, SandboxStatus, SnapshotDescriptor, Substrate } from "../substrate/substrate.ts";
import { egressPolicyOf } from "./egress-rules.ts";
import type { SandboxVolumes } from "./volume-service.ts";
import { effectiveInternetAccess, parsePlacement, PLACEMENT_METADATA_KEY } from "./create-input.ts";
import type { SandboxChanges } from "./changes.ts";
import { isLive, type SandboxRecord, type SandboxRepo, type TemplateResolver } from "./model.ts";
import type { DeleteFilter, SnapshotRepo, Snapshot } from "./snapshot-repo.ts";

/** Upper bound of one snapshot call to a node (checkpoint, suspend, restore). */
export const SNAPSHOT_CALL_MS = 10 * 60_000;

export interface SandboxDefaults {
  vcpu: number;
  memoryMib: number;
  diskMib: number;
}

/**
 * Events other components react to: `ended(id)` when a sandbox stops serving traffic
 * (killed, failed, paused, suspended) so the gateway cuts its streams and forgets
 * its route; `started(rec)` whenever a write leaves a sandbox running (create, adoption,
 * resume, restore, evacuation, a network or timeout change: `announcingRepo`, changes.ts),
 * so the gateway routes with the current record before the caller's first command.
 */
export interface SandboxEventMap {
  ended: [id: SandboxId];
  started: [rec: SandboxRecord];
}

export interface SandboxResources {
  /** Announces every write on `changes`. */
  repo: SandboxRepo;
  templates: TemplateResolver;
  substrate: Substrate;
  snapshots: SnapshotRepo;
  defaults: SandboxDefaults;
  log: Logger;
  now: () => Date;
  events: EventEmitter<SandboxEventMap>;
  changes: SandboxChanges;
  /** The waits' fallback poll (ms): a safety net behind the change feed. */
  pollMs: number;
  metrics: SandboxLifecycleMetrics;
  /** Volumes (volume-service.ts); absent = a create with volume mounts is refused. */
  volumes?: SandboxVolumes;
}

/** A live sandbox of this tenant; killed, failed and others' are not found. */
export async function liveSandbox(r: SandboxResources, tenantId: TenantId, id: string): Promise<SandboxRecord> {
  const rec = await r.repo.get(tenantId, id as SandboxId);
  if (!rec || !isLive(rec.state)) throw notFound(`sandbox ${id} not found`);
  return rec;
}

/**
 * Refuses a snapshot of a sandbox that mounts volumes (suspend, fork, named snapshot, a
 * move): a snapshot never copies a volume, and a restore elsewhere could not mount it.
 * The sandbox's record of its volumes stays (store sandbox_volumes).
 */
export async function refuseWithVolumes(r: SandboxResources, id: string, what: string): Promise<void> {
  const mounts = r.volumes ? await r.volumes.mountsOf(id) : [];
  if (!mounts.length) return;
  throw new SpaceError(
    "failed_precondition",
    `sandbox ${id} mounts volume${mounts.length > 1 ? "s" : ""} ${mounts.map((m) => m.name).join(", ")}: ${what} is not supported for it (a snapshot never copies a volume)`,
  );
}

/** How a state reads in messages to callers (suspended is E2B's paused). */
export function toPublicState(s: string): string {
  return s === "suspended" || s === "suspending" ? "paused" : s;
}

/** The node spec of a sandbox (restore, fork): its token, env and network policy re-applied. */
export function specOf(rec: SandboxRecord, executionId: string): SandboxSpec {
  return {
    sandboxId: rec.id,
    executionId,
    template: rec.templateId ?? "",
    vcpu: rec.vcpu,
    memoryMib: rec.memoryMib,
    diskMib: rec.diskMib,
    envVars: rec.envVars ?? {},
    ...(rec.envdAccessToken ? { accessToken: rec.envdAccessToken } : {}),
    allowInternetAccess: effectiveInternetAccess(rec),
    network: egressPolicyOf(rec.allowInternetAccess, rec.network),
  };
}

/**
 * A node restore of `desc` holding the snapshot row meanwhile, so the retention sweeper
 * never deletes what a restore is using (retention_restore_source_guard); refused when
 * the sweeper has already claimed it.
 */
export async function restoreHeld(r: SandboxResources, ref: SandboxRef, desc: SnapshotDescriptor, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
  if (!(await r.snapshots.hold(desc.snapshotId, new Date(Date.now() + SNAPSHOT_CALL_MS)))) {
    throw new SpaceError("failed_precondition", `snapshot ${desc.snapshotId} is being deleted by retention and cannot be restored`);
  }
  try {
    return await r.substrate.restore(ref, desc, spec, signal);
  } finally {
    await r.snapshots.release(desc.snapshotId).catch((e: unknown) => r.log.warn({ err: e, snapshotId: desc.snapshotId }, "could not release a snapshot hold"));
  }
}

/** Where a restore of `snap` may run: anywhere that can run its environment when durable, else pinned to its node. */
export async function placeFor(r: SandboxResources, rec: SandboxRecord, snap: Snapshot, signal: AbortSignal): Promise<SandboxRef> {
  const placement = parsePlacement(rec.metadata[PLACEMENT_METADATA_KEY]);
  const environment = r.templates.binding ? await r.templates.binding(rec.templateId ?? "") : undefined;
  return r.substrate.place(
    {
      sandboxId: rec.id,
      templateId: rec.templateId ?? "",
      vcpu: rec.vcpu,
      memoryMib: rec.memoryMib,
      diskMib: rec.diskMib,
      ...(placement.nodeGroup !== undefined ? { nodeGroup: placement.nodeGroup } : {}),
      ...(placement.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
      ...(environment ? { environment } : {}),
      ...(snap.state !== "durable" && snap.nodeId ? { pinnedNodeId: snap.nodeId } : {}),
    },
    signal,
  );
}

/** Marks snapshots deleted and frees the nodes' local copies (best effort; blob parts stay for retention). */
export async function dropSnapshots(r: SandboxResources, sandboxId: string, filter: DeleteFilter): Promise<void> {
  try {
    const gone = await r.snapshots.markDeleted(sandboxId, filter);
    await Promise.all(
      gone
        .filter((g) => g.nodeId)
        .map((g) =>
          r.substrate.dropSnapshot(g.nodeId!, g.id, AbortSignal.timeout(30_000)).catch((e: unknown) =>
            r.log.warn({ err: e, sandboxId, snapshotId: g.id }, "could not free a node's local snapshot copy"),
          ),
        ),
    );
  } catch (e: unknown) {
    r.log.warn({ err: e, sandboxId }, "could not delete snapshots");
  }
}
