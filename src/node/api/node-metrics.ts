/**
 * The node's own metrics, read at scrape time from what the agent already holds (its
 * inventory, the manager's sandboxes, their cgroups): nothing is counted on the create
 * path. One inventory per scrape serves every capacity family. Served at node-api `GET /metrics` (the process registry: in `space up` the
 * control plane's families too).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Registry } from "prom-client";
import { perScrape, scrapedGauge } from "../../core/metrics.ts";
import type { NodeInventory } from "../../contract/node-api.ts";
import type { SandboxManager } from "../sandboxes/manager.ts";
import type { Runtime } from "../../runtime/runtime.ts";

export interface NodeMetricsSources {
  inventory: () => Promise<NodeInventory>;
  manager: () => SandboxManager | undefined;
  runtime: () => Runtime | undefined;
  /** Warm disks ready, by template (node/disk/warm-disks.ts); empty without btrfs disks. */
  warmDisks: () => ReadonlyMap<string, number>;
}

const MIB = 1024 * 1024;

export function registerNodeMetrics(registry: Registry, src: NodeMetricsSources): void {
  const inventory = perScrape(src.inventory);
  const family = (name: string, help: string, value: (inv: NodeInventory) => number) =>
    scrapedGauge(registry, name, help, ["node"], async () => {
      const inv = await inventory();
      return [{ labels: { node: inv.nodeId }, value: value(inv) }];
    });
  family("space_node_capacity_vcpu", "vCPUs this node offers", (i) => i.capacity.vcpu);
  family("space_node_allocated_vcpu", "vCPUs requested by this node's resident sandboxes", (i) => i.used.vcpu);
  family("space_node_capacity_memory_bytes", "Memory this node offers", (i) => i.capacity.memoryMib * MIB);
  family("space_node_allocated_memory_bytes", "Memory requested by this node's resident sandboxes", (i) => i.used.memoryMib * MIB);
  family("space_node_capacity_disk_bytes", "Sandbox disk this node offers (its cache less the reserve)", (i) => i.capacity.diskMib * MIB);
  family("space_node_allocated_disk_bytes", "Disk requested by this node's sandboxes (stopped ones included)", (i) => i.used.diskMib * MIB);
  family("space_node_capacity_slots", "Network slots (sandboxes) this node can hold", (i) => i.capacity.networkSlots);
  family("space_node_used_slots", "Network slots in use", (i) => i.used.networkSlots);

  scrapedGauge(registry, "space_node_sandboxes", "Sandboxes on this node by state (running ones each run one envd)", ["state"], () => {
    const counts = { running: 0, paused: 0, stopped: 0 };
    for (const s of src.manager()?.list() ?? []) counts[s.state]++;
    return Object.entries(counts).map(([state, value]) => ({ labels: { state }, value }));
  });
  scrapedGauge(registry, "space_node_warm_disks", "Sandbox disks made ahead and ready, by template (SPACE_NODE_WARM_DISKS each, for the recently used ones)", ["template"], () =>
    [...src.warmDisks()].map(([template, value]) => ({ labels: { template }, value })),
  );
  scrapedGauge(registry, "space_node_sandbox_processes", "Processes inside this node's running sandboxes (envd and its children; cgroup pids.current)", [], async () => {
    const runtime = src.runtime();
    const running = (src.manager()?.list() ?? []).filter((s) => s.state === "running");
    if (!runtime) return [];
    const counts = await Promise.all(
      running.map(async (s) => {
        const dir = runtime.cgroupDirs(s.sandboxId).pids;
        return dir ? Number((await readFile(join(dir, "pids.current"), "utf8").catch(() => "0")).trim()) || 0 : 0;
      }),
    );
    return [{ labels: {}, value: counts.reduce((a, b) => a + b, 0) }];
  });
}
