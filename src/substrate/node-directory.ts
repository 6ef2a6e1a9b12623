/**
 * The nodes a substrate can place on, as both substrates see them: Direct reads the
 * store's registered nodes (src/sandboxes/queries.ts `StoreNodeDirectory`), Kubernetes
 * the virtual Node objects (kubernetes/kube-node-directory.ts). Placement, template
 * builds, warm pools and the census read nodes through this one interface.
 */
import type { NodeMeasured } from "./capacity.ts";
import type { PlacementNode } from "./placement.ts";

/** A node as its directory knows it. */
export interface NodeEntry extends PlacementNode {
  /** node-api base URL */
  url: string;
  /** What the node measured at its last heartbeat (the capacity model reconciles with it). */
  measured?: NodeMeasured;
  /** Its count while past its memory target (capacity.ts `CapacityNode.memoryFullSlots`). */
  memoryFullSlots?: number;
}

export interface NodeListOptions {
  /** Read through any snapshot (src/substrate/cached-node-directory.ts); directories without one always read fresh. */
  fresh?: boolean;
}

export interface NodeDirectory {
  /** Every node of this substrate, whatever its status (placement explains exclusions). */
  list(signal: AbortSignal, opts?: NodeListOptions): Promise<NodeEntry[]>;
  get(id: string, signal: AbortSignal, opts?: NodeListOptions): Promise<NodeEntry | null>;
}
