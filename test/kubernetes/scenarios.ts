/**
 * The smoke scenarios (behaviours.md E) with their `substrates` attribute: where each
 * applies, and for a substrate where it does not, why. The Kubernetes end-to-end suite
 * runs the ones that apply to it and prints every skip with its reason; on Direct the
 * same scenarios run in the suites named by `direct`.
 */
export type SubstrateName = "direct" | "kubernetes";

export interface Scenario {
  name: string;
  substrates: readonly SubstrateName[];
  /** Why it does not run on a substrate it lacks. */
  skipReason?: Partial<Record<SubstrateName, string>>;
  /** The Direct suite that runs it (npm test -- <path>). */
  direct?: string;
}

export const scenarios: readonly Scenario[] = [
  { name: "cold_create_environment", substrates: ["direct", "kubernetes"], direct: "test/e2e/ecw" },
  { name: "command_round_trip", substrates: ["direct", "kubernetes"], direct: "test/e2e/ecw" },
  { name: "filesystem_round_trip", substrates: ["direct", "kubernetes"], direct: "test/e2e/ecw" },
  { name: "sandbox_delete", substrates: ["direct", "kubernetes"], direct: "test/e2e/ecw" },
  { name: "create_disk_below_rootfs_400", substrates: ["direct", "kubernetes"], direct: "test/e2e/ecw" },
  { name: "pause_connect", substrates: ["direct", "kubernetes"], direct: "test/e2e/snapshots" },
  { name: "fork", substrates: ["direct", "kubernetes"], direct: "test/e2e/snapshots" },
  { name: "warm_pool_environment", substrates: ["direct", "kubernetes"], direct: "test/e2e/warm-pools" },
  { name: "template_build_boots", substrates: ["direct", "kubernetes"], direct: "test/e2e/templates" },
  { name: "node_group_boundary_schedules", substrates: ["direct", "kubernetes"], direct: "test/e2e/fleet" },
  {
    name: "node_registration_verify",
    substrates: ["direct"],
    direct: "test/e2e/fleet",
    skipReason: { kubernetes: "nodes are Node objects a node agent applies itself (SSA under its field manager); there is no registration call to verify" },
  },
  {
    name: "gentle_drain_leaves_sandbox_resident",
    substrates: ["direct"],
    direct: "test/e2e/fleet",
    skipReason: { kubernetes: "drain on this substrate is cordoning the Node (kubectl cordon); the admin drain routes act on Direct's node records" },
  },
  {
    name: "forced_drain_evacuates_sandbox",
    substrates: ["direct"],
    direct: "test/e2e/fleet",
    skipReason: { kubernetes: "evacuation is driven by the admin drain route over Direct's node records; not built for Nodes" },
  },
  {
    name: "node_lost_reports_sandboxes_lost",
    substrates: ["direct"],
    direct: "test/e2e/fleet",
    skipReason: { kubernetes: "node liveness reads Direct's heartbeats; a lost Node's pods are not yet marked lost" },
  },
];

/** The scenarios that do not apply to `substrate`, each with its reason. */
export function skippedOn(substrate: SubstrateName): Array<{ name: string; reason: string }> {
  return scenarios
    .filter((s) => !s.substrates.includes(substrate))
    .map((s) => ({ name: s.name, reason: s.skipReason?.[substrate] ?? `applies to ${s.substrates.join(", ")} only` }));
}
