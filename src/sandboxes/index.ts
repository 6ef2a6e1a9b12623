/**
 * Builds the sandbox layer over the store: the one SandboxService that ECW, the Native
 * API, the gateway and the timeout enforcer share (in one process: the same instance,
 * so a kill cuts gateway streams at once).
 */
import type { Db } from "../store/db.ts";
import { listenSandboxChanges } from "../store/sandboxes.ts";
import type { Logger } from "../core/log.ts";
import type { SandboxLifecycleMetrics } from "../core/metrics.ts";
import type { Substrate } from "../substrate/substrate.ts";
import type { NodeDirectory } from "../substrate/node-directory.ts";
import { SandboxService, type SandboxDefaults } from "./service.ts";
import type { WarmAdopter, WarmMembers } from "./warm-adopter.ts";
import { StoreNodeDirectory, StoreSandboxRepo, StoreTemplates } from "./queries.ts";
import { StoreSnapshotRepo } from "./snapshot-repo.ts";
import type { QuotaLimits } from "../store/tenant-quotas.ts";
import { SandboxVolumes } from "./volume-service.ts";

export interface SandboxLayerDeps {
  db: Db;
  log: Logger;
  /** SPACE_DEFAULT_VCPU / _MEMORY_MIB / _DISK_MIB. */
  defaults: SandboxDefaults;
  /** The substrate, chosen by the caller (cli: SPACE_SUBSTRATE; tests: the fake). */
  substrate: Substrate;
  /** The substrate's nodes when they are not the store's registered (direct) nodes (Kubernetes: the Node objects). */
  nodes?: NodeDirectory;
  /** Warm-pool adoption over the service's members and the layer's nodes and templates; absent = creates boot cold. */
  warmPools?: (members: WarmMembers, layer: Pick<SandboxLayer, "nodes" | "templates">) => WarmAdopter;
  /** Tenant quota defaults (SPACE_QUOTA_*), enforced where rows become live; absent = none. */
  quotas?: QuotaLimits;
  /** The waits' fallback poll (ms); see SandboxServiceDeps.pollMs. */
  pollMs?: number;
  /** Lifecycle latencies and failed creates (core/metrics.ts); absent = unregistered. */
  metrics?: SandboxLifecycleMetrics;
  /** SPACE_VOLUME_DEFAULT_MIB (default 10240). */
  volumeDefaultMib?: number;
}

export interface SandboxLayer {
  sandboxes: SandboxService;
  substrate: Substrate;
  /** The substrate's nodes (warm pools check members against them). */
  nodes: NodeDirectory;
  templates: StoreTemplates;
}

export function createSandboxLayer(deps: SandboxLayerDeps): SandboxLayer {
  const nodes = deps.nodes ?? new StoreNodeDirectory(deps.db);
  const substrate = deps.substrate;
  // Node-only templates: from the store's nodes on Direct, from the substrate's directory otherwise.
  const templates = new StoreTemplates(deps.db, deps.nodes);
  const warmPools = deps.warmPools;
  const sandboxes = new SandboxService({
    repo: new StoreSandboxRepo(deps.db, deps.quotas),
    templates,
    substrate,
    defaults: deps.defaults,
    log: deps.log,
    snapshots: new StoreSnapshotRepo(deps.db, deps.quotas),
    changeFeed: (fn) => listenSandboxChanges(deps.db, fn),
    ...(deps.pollMs !== undefined ? { pollMs: deps.pollMs } : {}),
    ...(deps.metrics ? { metrics: deps.metrics } : {}),
    volumes: new SandboxVolumes({
      db: deps.db,
      substrate,
      log: deps.log,
      defaultSizeMib: deps.volumeDefaultMib ?? 10240,
      ...(deps.quotas ? { quotas: deps.quotas } : {}),
    }),
    ...(warmPools ? { warmPools: (members: WarmMembers) => warmPools(members, { nodes, templates }) } : {}),
  });
  return { sandboxes, substrate, nodes, templates };
}

export { SandboxService } from "./service.ts";
