/**
 * The one seam the API and the controller use to place, run and observe sandboxes.
 * `direct/` places on registered nodes itself and calls node-api; a Kubernetes
 * implementation maps `place` to creating a Pod (kube-scheduler decides the node) and
 * `start` to waiting (by watch) for the pod's IP and readiness.
 *
 * It is the only way the control plane reaches a node: sandboxes (place … restore), warm
 * members (`init`) and template builds (`startBuild` … `dropTemplate`, on a node the
 * caller chose by placement over the substrate's node directory).
 *
 * Every verb takes an AbortSignal; `kill`, `dropSnapshot` and `dropTemplate` are
 * idempotent (absent = ok).
 */
import type { MetricsRange, NetworkRecord, SandboxEgress, SandboxInit, SandboxMetrics, SandboxSpec, SandboxStatus } from "../contract/node-api.ts";
import type { SandboxLogEntry } from "../contract/envd-logs.ts";
import type { LogQuery } from "../contract/sandbox-logs.ts";
import type { SnapshotDescriptor, SnapshotKind } from "../contract/snapshot-descriptor.ts";
import type { NodeBuildRequest, NodeBuildStatusWire } from "../contract/node-builds.ts";
import type { EnvironmentBinding } from "./placement.ts";
import type { NodeVolume, VolumeSent } from "../contract/volume-wire.ts";

export type { SandboxInit, SandboxMetrics, SandboxSpec, SandboxStatus, EnvironmentBinding, NodeBuildRequest, NodeBuildStatusWire, SnapshotDescriptor, SnapshotKind };
export type { LogQuery, MetricsRange, SandboxLogEntry };

export interface SnapshotOptions {
  /** `sn_` + 16 chars, chosen by the control plane (its snapshot row id). */
  snapshotId: string;
  /** Publish every part to the blob store before answering (durable, restorable anywhere). */
  upload: boolean;
  /** What a suspend keeps (default `full`); a live checkpoint is always `full`. */
  kind?: SnapshotKind;
  /** A capture only: the ids of the restores of it expected on its node (forks), prepared during the dump. */
  restoreAs?: string[];
}

/** Where a sandbox lives once placed. Opaque beyond `nodeId` to callers. */
export interface SandboxRef {
  sandboxId: string;
  nodeId: string;
  /** `place` wrote `nodeId` on the sandbox's row itself (a store reservation): the caller need not. */
  recorded?: true;
}

export interface PlacementRequest {
  sandboxId: string;
  templateId: string;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  /** Only nodes of this group (undefined = any group). */
  nodeGroup?: string;
  /** Node labels the sandbox requires (operator extras are added by the substrate). */
  nodeSelector?: Record<string, string>;
  /** The work's execution-environment binding (behaviours.md C); absent = unbound. */
  environment?: EnvironmentBinding;
  /**
   * Restore pinned to its source node: placed there or refused (409 with the drain hint
   * when the gate is on and the node does not publish the environment).
   */
  pinnedNodeId?: string;
}

/** How the gateway reaches a port of a sandbox: a base URL and headers to add. */
export interface ProxyTarget {
  /** e.g. http://10.0.0.5:3002/v1/sandboxes/<id>/proxy/49983 (no trailing slash). */
  baseUrl: URL;
  headers: Record<string, string>;
}

export interface Substrate {
  /** Chooses where the sandbox runs (no side effect on the node yet for direct). */
  place(req: PlacementRequest, signal: AbortSignal): Promise<SandboxRef>;
  /** Starts it there; resolves once envd answers. Errors keep their SpaceError code. */
  start(ref: SandboxRef, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus>;
  /** Freezes in memory (resident pause). */
  pause(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus>;
  resume(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus>;
  stop(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus>;
  /** Boots a stopped sandbox again where it is (its disk kept); resolves once envd answers. */
  restart(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus>;
  /**
   * Personalises a running sandbox without restarting it (a warm member on adoption): env
   * vars and envd access token; also gives a member booted in the background its normal CPU priority.
   */
  init(ref: SandboxRef, body: SandboxInit, signal: AbortSignal): Promise<void>;
  /** Ends it and frees its node resources. Absent = ok. */
  kill(ref: SandboxRef, signal: AbortSignal): Promise<void>;
  /** What the node sees now; null when the node does not know the sandbox. */
  observe(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus | null>;
  metrics(ref: SandboxRef, signal: AbortSignal): Promise<SandboxMetrics>;
  /**
   * The samples its node took in the range (ms since the epoch, inclusive), oldest first:
   * one every SPACE_METRICS_INTERVAL_MS while it runs there, kept a while after it left.
   * [] when the node never had it.
   */
  metricsHistory(ref: SandboxRef, range: MetricsRange, signal: AbortSignal): Promise<SandboxMetrics[]>;
  /**
   * Its log entries (envd's structured lines) the query selects, as its node keeps them:
   * also after it left the node (kill, suspend) for SPACE_SANDBOX_LOG_RETENTION_S. [] when
   * the node never had it.
   */
  logs(ref: SandboxRef, query: LogQuery, signal: AbortSignal): Promise<SandboxLogEntry[]>;
  /** Replaces the egress policy of a running sandbox (`policy`, compiled by src/sandboxes/egress-rules.ts; else all or nothing). */
  setEgress(ref: SandboxRef, egress: SandboxEgress, signal: AbortSignal): Promise<void>;
  /** Destinations the sandbox's node recorded: observed (observe mode) and refused by its policy. */
  networkRecord(ref: SandboxRef, signal: AbortSignal): Promise<NetworkRecord>;
  /** Where the gateway forwards traffic for `port` of this sandbox. */
  proxyTarget(ref: SandboxRef, port: number, signal: AbortSignal): Promise<ProxyTarget>;
  /**
   * Suspend: memory checkpoint + disk snapshot (`kind: "disk"`: the disk only); the sandbox
   * is gone from its node when it resolves. A failure leaves it running on the node (the
   * node thaws it).
   */
  suspend(ref: SandboxRef, opts: SnapshotOptions, signal: AbortSignal): Promise<SnapshotDescriptor>;
  /** Capture: a snapshot of a running sandbox that keeps running (fork source, named snapshots). */
  capture(ref: SandboxRef, opts: SnapshotOptions, signal: AbortSignal): Promise<SnapshotDescriptor>;
  /**
   * Restores `snapshot` as `spec.sandboxId` (a new id for forks) where `place` put it;
   * resolves once envd answers (re-initialised with the spec's token and env). A `disk`
   * snapshot (or a descriptor whose kind the caller set to `disk`) boots fresh from the disk.
   */
  restore(ref: SandboxRef, snapshot: SnapshotDescriptor, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus>;
  /**
   * Puts the parts of a node's local copy (taken with `upload: false`) in the blob store,
   * encrypted as at capture; resolves with the durable descriptor. not_found when the node
   * has no copy; unavailable when the node cannot be reached.
   */
  publishSnapshot(nodeId: string, snapshotId: string, signal: AbortSignal): Promise<SnapshotDescriptor>;
  /** Frees a node's local copy of a snapshot (absent = ok; the blob store keeps its parts). */
  dropSnapshot(nodeId: string, snapshotId: string, signal: AbortSignal): Promise<void>;
  /** Starts a template build on `nodeId` (idempotent by build id); it runs in the background. */
  startBuild(nodeId: string, req: NodeBuildRequest, signal: AbortSignal): Promise<void>;
  /** A build's status and its log entries from `logsOffset`; not_found when the node lost it. */
  buildStatus(nodeId: string, buildId: string, logsOffset: number, signal: AbortSignal): Promise<NodeBuildStatusWire>;
  /** Points node template `alias` at built template `name` on `nodeId` (what sandboxes of it boot). */
  pointTemplate(nodeId: string, alias: string, name: string, signal: AbortSignal): Promise<void>;
  /** Removes node template `name` from `nodeId` (absent = ok). */
  dropTemplate(nodeId: string, name: string, signal: AbortSignal): Promise<void>;
  /**
   * A node for a volume that is on none yet (its first write with no sandbox): a ready node
   * of `nodeGroup` (any when undefined) with the most free disk; `exclude`: nodes it must
   * leave (a drain). resource_exhausted when none can hold `sizeMib`.
   */
  placeVolume(sizeMib: number, o: { exclude?: readonly string[] }, signal: AbortSignal): Promise<string>;
  /** Makes the volume on `nodeId` (exists = ok) with its quota. */
  ensureVolume(nodeId: string, volumeId: string, sizeMib: number, signal: AbortSignal): Promise<NodeVolume>;
  /** Deletes the volume's data on `nodeId` (absent = ok). */
  dropVolume(nodeId: string, volumeId: string, signal: AbortSignal): Promise<void>;
  /** Where the volume content API is forwarded for a volume on `nodeId` (volume-wire.ts routes under it). */
  volumeTarget(nodeId: string, volumeId: string, signal: AbortSignal): Promise<ProxyTarget>;
  /** Sends a copy of the volume on `nodeId` to the blob store at `key` (encrypted like snapshots). */
  sendVolume(nodeId: string, volumeId: string, key: string, signal: AbortSignal): Promise<VolumeSent>;
  /** Receives a sent volume onto `nodeId`. */
  receiveVolume(nodeId: string, volumeId: string, sent: VolumeSent, signal: AbortSignal): Promise<NodeVolume>;
}
