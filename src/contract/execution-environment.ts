/**
 * Execution environment: the tuple that decides whether this node can run a build or a
 * snapshot (runtime kind and version, rootfs format, CPU features that memory checkpoints
 * depend on). Its digest names it; the label is `space.dev/env-sha256-<12 hex>`. A
 * contract: the node publishes the label, the control plane places work by it.
 */
import { createHash } from "node:crypto";

export interface ExecutionEnvironment {
  runtimeKind: string;
  runtimeVersion: string;
  rootfsFormat: "btrfs-subvolume" | "directory";
  cpuFeatures: string[];
}

/** `sha256:<64 hex>` of the canonical JSON of the environment. */
export function environmentDigest(e: ExecutionEnvironment): string {
  const canonical = JSON.stringify({
    runtimeKind: e.runtimeKind,
    runtimeVersion: e.runtimeVersion,
    rootfsFormat: e.rootfsFormat,
    cpuFeatures: [...e.cpuFeatures].sort(),
  });
  return `sha256:${createHash("sha256").update(canonical).digest("hex")}`;
}

/** `space.dev/env-sha256-<first 12 hex>` (value `usable` on a node that can run it). */
export function environmentLabel(digest: string): string {
  const [alg, hex] = digest.split(":");
  return `space.dev/env-${alg}-${(hex ?? "").slice(0, 12)}`;
}
