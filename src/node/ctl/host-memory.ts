/**
 * What the host's memory looks like now, for the capacity model (docs/capacity.md):
 * MemAvailable (what can be had without swapping: free plus reclaimable cache) and the
 * memory pressure stall (PSI `some` avg10: the share of the last 10 s some task waited on
 * memory). A kernel without PSI reports no pressure; a host without /proc/meminfo no figure.
 */
import { readFile } from "node:fs/promises";

export interface HostMemory {
  memoryAvailableMib?: number;
  memoryPressure?: number;
}

export async function hostMemory(proc = "/proc"): Promise<HostMemory> {
  const [meminfo, psi] = await Promise.all([
    readFile(`${proc}/meminfo`, "utf8").catch(() => ""),
    readFile(`${proc}/pressure/memory`, "utf8").catch(() => ""),
  ]);
  const availKib = /^MemAvailable:\s+(\d+) kB/m.exec(meminfo)?.[1];
  const some = /^some avg10=([\d.]+)/m.exec(psi)?.[1];
  return {
    ...(availKib !== undefined ? { memoryAvailableMib: Math.floor(Number(availKib) / 1024) } : {}),
    ...(some !== undefined ? { memoryPressure: Number(some) } : {}),
  };
}

/**
 * Whether host memory now differs from what `published` measured by `byMib` or more, either
 * way (sandboxes growing or created, memory coming back from ended ones): the capacity
 * model's reading is then out of date by at least one sandbox's request.
 */
export function memoryMoved(published: Pick<HostMemory, "memoryAvailableMib">, now: HostMemory, byMib: number): boolean {
  if (published.memoryAvailableMib === undefined || now.memoryAvailableMib === undefined) return false;
  return Math.abs(now.memoryAvailableMib - published.memoryAvailableMib) >= byMib;
}
