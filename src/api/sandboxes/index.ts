/**
 * Builds the sandbox layer over the store: the one SandboxService that ECW, the Native
 * API, the gateway and the timeout enforcer share (in one process: the same instance,
 * so a kill cuts gateway streams at once).
 */
import type { Db } from "../../store/db.ts";
import type { Logger } from "../../core/log.ts";
import type { Substrate } from "../../substrate/substrate.ts";
import { DirectSubstrate, type DirectSubstrateDeps } from "../../substrate/direct/direct-substrate.ts";
import { SandboxService, type SandboxDefaults } from "./service.ts";
import { StoreApiKeys, StoreNodeDirectory, StoreSandboxRepo, StoreTemplates } from "./queries.ts";
import type { ApiKeyAuth } from "./model.ts";
import { StoreSnapshotRepo } from "./snapshot-repo.ts";

export interface SandboxLayerDeps {
  db: Db;
  log: Logger;
  /** SPACE_INTERNAL_TOKEN (resolved). */
  internalToken: string;
  /** SPACE_DEFAULT_VCPU / _MEMORY_MIB / _DISK_MIB. */
  defaults: SandboxDefaults;
  /** Defaults to the direct substrate over the store's registered nodes. */
  substrate?: Substrate;
  /** Direct placement: gate mode, operator selector extras, gate observations. */
  placement?: Pick<DirectSubstrateDeps, "gate" | "selectorExtras" | "onGate" | "overcommit">;
}

export interface SandboxLayer {
  sandboxes: SandboxService;
  apiKeys: ApiKeyAuth;
  substrate: Substrate;
}

export function createSandboxLayer(deps: SandboxLayerDeps): SandboxLayer {
  const substrate =
    deps.substrate ?? new DirectSubstrate({ nodes: new StoreNodeDirectory(deps.db), internalToken: deps.internalToken, ...deps.placement });
  const sandboxes = new SandboxService({
    repo: new StoreSandboxRepo(deps.db),
    templates: new StoreTemplates(deps.db),
    substrate,
    defaults: deps.defaults,
    log: deps.log,
    snapshots: new StoreSnapshotRepo(deps.db),
  });
  return { sandboxes, apiKeys: new StoreApiKeys(deps.db), substrate };
}

export { SandboxService } from "./service.ts";
