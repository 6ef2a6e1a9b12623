/**
 * `SPACE_WARM_POOLS`: pools from configuration, `template=size[..maxSize][:vcpu/memoryMib/diskMib]`
 * separated by commas, e.g. `base=5,python=2..20:1/512/2048` (`..maxSize`: it grows for a
 * burst, plan.ts `burstSize`). A pool without a shape takes
 * the sandbox defaults (SPACE_DEFAULT_VCPU/_MEMORY_MIB/_DISK_MIB), which is what a create
 * that asks for nothing gets, so it adopts. Their idle policy is the configured default
 * (SPACE_WARM_POOL_IDLE_POLICY, _MIN_FREE_MEMORY_PERCENT).
 */
import { SpaceError } from "../../core/errors.ts";
import type { IdlePolicy, WarmPoolSpec } from "../../store/warm-pools.ts";

const ENTRY = /^([A-Za-z0-9._:/-]{1,200})=(\d{1,4})(?:\.\.(\d{1,4}))?(?::(\d{1,3})\/(\d{2,7})\/(\d{2,8}))?$/;

export function parseWarmPoolsConfig(
  raw: string,
  defaults: { vcpu: number; memoryMib: number; diskMib: number; idlePolicy?: IdlePolicy; minFreeMemoryPercent?: number },
): WarmPoolSpec[] {
  const out: WarmPoolSpec[] = [];
  for (const part of raw.split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = ENTRY.exec(part);
    if (!m) throw new SpaceError("invalid_argument", `SPACE_WARM_POOLS entry '${part}' must be template=size[..maxSize] or template=size[..maxSize]:vcpu/memoryMib/diskMib`);
    const size = Number(m[2]);
    if (size > 1000) throw new SpaceError("invalid_argument", `SPACE_WARM_POOLS entry '${part}': size ${size} is above 1000`);
    const maxSize = m[3] ? Number(m[3]) : null;
    if (maxSize !== null && (maxSize < size || maxSize > 1000)) throw new SpaceError("invalid_argument", `SPACE_WARM_POOLS entry '${part}': max size ${maxSize} must be from size (${size}) to 1000`);
    if (out.some((p) => p.name === m[1])) throw new SpaceError("invalid_argument", `SPACE_WARM_POOLS names template '${m[1]}' twice`);
    out.push({
      name: m[1]!,
      size,
      maxSize,
      vcpu: m[4] ? Number(m[4]) : defaults.vcpu,
      memoryMib: m[5] ? Number(m[5]) : defaults.memoryMib,
      diskMib: m[6] ? Number(m[6]) : defaults.diskMib,
      ...(defaults.idlePolicy ? { idlePolicy: defaults.idlePolicy } : {}),
      ...(defaults.minFreeMemoryPercent !== undefined ? { minFreeMemoryPercent: defaults.minFreeMemoryPercent } : {}),
      source: "config",
    });
  }
  return out;
}
