/** The node-side lifecycle of a sandbox, as data. */
export type NodeState =
  /** Disk, slot and runtime being set up; envd not yet healthy. */
  | "creating"
  /** envd healthy, processes running. */
  | "running"
  /** Frozen by the cgroup freezer; memory resident. */
  | "paused"
  /** Processes ended; the disk is kept, the network slot released. */
  | "stopped"
  /** Being started again from its kept disk. */
  | "starting"
  /** Being released; gone afterwards. */
  | "killing";

export const transitions = {
  creating: ["running", "killing"],
  running: ["paused", "stopped", "killing"],
  paused: ["running", "stopped", "killing"],
  stopped: ["starting", "killing"],
  starting: ["running", "stopped", "killing"],
  killing: [],
} as const satisfies Record<NodeState, readonly NodeState[]>;

export function canTransition(from: NodeState, to: NodeState): boolean {
  return (transitions[from] as readonly NodeState[]).includes(to);
}
