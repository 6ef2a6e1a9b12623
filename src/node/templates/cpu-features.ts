/** The CPU features of this host, part of its execution environment (src/contract/execution-environment.ts). */
import { readFile } from "node:fs/promises";

export async function cpuFeatures(): Promise<string[]> {
  const info = await readFile("/proc/cpuinfo", "utf8").catch(() => "");
  const flags = /^flags\s*:\s*(.*)$/m.exec(info)?.[1] ?? "";
  return [...new Set(flags.split(/\s+/).filter(Boolean))].sort();
}
