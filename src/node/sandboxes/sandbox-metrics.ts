/**
 * A sandbox's metrics from its cgroups (CPU over the interval since the last sample, memory
 * without page cache) and its disk store (what the disk holds). The disk's usage costs a
 * `btrfs qgroup show`; the node's periodic sampling reuses a reading up to `diskMaxAgeMs`
 * old so a full node does not run one per sandbox every few seconds.
 *
 * The cgroup files are read synchronously: the kernel answers in tens of microseconds, while
 * a promise-based read of a file of unknown size takes four thread-pool round trips and a
 * 64 KiB buffer, which made the samples of a node's idle sandboxes a large share of its CPU.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Runtime } from "../../runtime/runtime.ts";
import type { SandboxMetrics, SandboxSpec } from "../../contract/node-api.ts";
import type { SandboxDisks } from "../disk/sandbox-disks.ts";

/** The sandbox as metrics sees it; `cpuSample` is the previous reading, replaced by this one. */
export interface Sampled {
  spec: SandboxSpec;
  cpuSample?: { at: number; usageNs: number };
  /** The last disk reading (bytes referenced), reused while younger than the caller allows. */
  diskSample?: { at: number; usedBytes: number };
}

export async function sandboxMetrics(runtime: Runtime, disks: SandboxDisks, s: Sampled, signal: AbortSignal, diskMaxAgeMs = 0): Promise<SandboxMetrics> {
  const id = s.spec.sandboxId;
  const dirs = runtime.cgroupDirs(id);
  const readText = (p: string | undefined) => {
    try {
      return p ? readFileSync(p, "utf8") : "";
    } catch {
      return "";
    }
  };
  const readNum = (p: string | undefined) => Number(readText(p).trim());
  let cpuUsedPct = 0;
  const usage = readNum(dirs.cpuacct && join(dirs.cpuacct, "cpuacct.usage"));
  const now = performance.now();
  let prev = s.cpuSample;
  if (!prev && usage) {
    // No earlier sample: measure over a short window.
    prev = { at: now, usageNs: usage };
    await new Promise((r) => setTimeout(r, 100));
  }
  const usage2 = prev && prev.at === now ? readNum(dirs.cpuacct && join(dirs.cpuacct, "cpuacct.usage")) : usage;
  const now2 = performance.now();
  if (prev && now2 > prev.at) cpuUsedPct = Math.min(100, ((usage2 - prev.usageNs) / 1e6 / (now2 - prev.at) / s.spec.vcpu) * 100);
  s.cpuSample = { at: now2, usageNs: usage2 };
  const memUsed = readNum(dirs.memory && join(dirs.memory, "memory.usage_in_bytes"));
  const stat = readText(dirs.memory && join(dirs.memory, "memory.stat"));
  const memCache = Number(/^total_cache (\d+)/m.exec(stat)?.[1] ?? /^cache (\d+)/m.exec(stat)?.[1] ?? 0);
  let diskUsed = s.diskSample && performance.now() - s.diskSample.at < diskMaxAgeMs ? s.diskSample.usedBytes : undefined;
  if (diskUsed === undefined) {
    diskUsed = (await disks.usage(id, signal))?.referencedBytes ?? 0;
    s.diskSample = { at: performance.now(), usedBytes: diskUsed };
  }
  return {
    timestamp: new Date().toISOString(),
    cpuCount: s.spec.vcpu,
    cpuUsedPct: Math.max(0, Math.round(cpuUsedPct * 100) / 100),
    memUsed: Math.max(0, memUsed - memCache),
    memTotal: s.spec.memoryMib * 1024 * 1024,
    memCache,
    diskUsed,
    diskTotal: s.spec.diskMib * 1024 * 1024,
  };
}
