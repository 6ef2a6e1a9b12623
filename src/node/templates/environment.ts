/**
 * Execution environment: the tuple that decides whether this node can run a build or a
 * snapshot (runtime kind and version, rootfs format, CPU features that memory checkpoints
 * depend on). Its digest names it; the label is `space.dev/env-sha256-<12 hex>`.
 */
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";

export interface ExecutionEnvironment {
  runtimeKind: string;
  runtimeVersion: string;
  rootfsFormat: "btrfs-subvolume" | "directory";
  cpuFeatures: string[];
}

export async function cpuFeatures(): Promise<string[]> {
  const info = await readFile("/proc/cpuinfo", "utf8").catch(() => "");
  const flags = /^flags\s*:\s*(.*)$/m.exec(info)?.[1] ?? "";
  return [...new Set(flags.split(/\s+/).filter(Boolean))].sort();
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
