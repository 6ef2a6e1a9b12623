import type { Logger } from "../core/log.ts";
import { OciRuntime } from "./oci/oci-runtime.ts";
import { CRIU_CONF } from "./oci/spec.ts";
import { ProcessRuntime } from "./process/process-runtime.ts";
import type { Runtime, RuntimeKind } from "./runtime.ts";

export type { Runtime, RuntimeKind, RunSpec, RuntimeState, RuntimeStatus } from "./runtime.ts";
export { OciRuntime } from "./oci/oci-runtime.ts";
export { ProcessRuntime } from "./process/process-runtime.ts";
export { favorCgroupMigrations } from "./oci/cgroup-dynmods.ts";

/** Files a runtime writes anew into its bundles dir at each start (never state to keep). */
export const RUNTIME_REGENERATED_FILES: readonly string[] = [CRIU_CONF];

export interface CreateRuntimeOptions {
  kind: RuntimeKind;
  stateDir: string;
  bundlesDir: string;
  criuPath?: string;
  /** Parent cgroup of sandboxes (default `space`). */
  cgroupParent?: string;
  logger: Logger;
}

export function createRuntime(o: CreateRuntimeOptions): Runtime {
  if (o.kind === "process") return new ProcessRuntime(o.logger);
  return new OciRuntime({ kind: o.kind, stateDir: o.stateDir, bundlesDir: o.bundlesDir, criuPath: o.criuPath, cgroupParent: o.cgroupParent, logger: o.logger });
}
