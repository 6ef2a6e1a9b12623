/**
 * Overcommit ratios: sandboxes idle most of the time, so vCPU, memory and disk limits may
 * exceed a node's size by this factor (network slots are a hard limit). Shared by both
 * sides: Direct placement counts with it, a node on Kubernetes publishes its capacity
 * times it as allocatable.
 */
export interface Overcommit {
  vcpu: number;
  memory: number;
  disk: number;
}
export const DEFAULT_OVERCOMMIT: Readonly<Overcommit> = { vcpu: 8, memory: 2, disk: 4 };
