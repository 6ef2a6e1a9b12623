/**
 * What a create asks for, and the checks every create applies (ECW, Native, warm-pool
 * refills, restores): resources, timeout, placement constraints, effective egress.
 */
import { invalid } from "../core/errors.ts";
import type { VolumeMountRequest } from "./volume-service.ts";
import { LIMITS } from "../core/limits.ts";
import type { SandboxId } from "../core/ids.ts";
import type { NetworkPolicy, OnTimeout, TemplateMatch, SandboxRecord } from "./model.ts";
import type { SnapshotKind } from "../substrate/substrate.ts";

export interface ResourceRequest {
  vcpu?: number;
  memoryMib?: number;
  diskMib?: number;
}

export interface CreateInput {
  /** A caller-chosen id (Native creates pick it when the operation is accepted); else a new one. */
  id?: SandboxId;
  /** Template id or alias. */
  template: string;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  timeoutSec: number;
  secure: boolean;
  allowInternetAccess: boolean;
  network: NetworkPolicy | null;
  onTimeout: OnTimeout;
  /** What a timeout pause keeps; absent = `full`. */
  pauseKind?: SnapshotKind;
  autoResume: boolean;
  resources: ResourceRequest;
  /**
   * Where it may run: node group and node selector. Absent: read from the metadata key
   * `space.placement` (JSON `{"node_group": "...", "node_selector": {"k": "v"}}`), which
   * both ECW and Native pass through unchanged.
   */
  placement?: PlacementInput;
  /**
   * Warm pools (src/controller/warm-pools): false = never adopt a warm member (the pool's
   * own refills). Creates with a caller-chosen `id` adopt only a member reserved for
   * that id at admission (Native).
   */
  adopt?: boolean;
  /** Trusted internal callers (warm-pool refills) that already resolved the template. */
  resolvedTemplate?: TemplateMatch;
  /** Nobody waits for it (warm-pool refills): the node boots it at low CPU priority until it is personalised. */
  background?: boolean;
  /**
   * When no node has room: keep the create queued (its row `creating`, on no node) and
   * place it as soon as one has, until `signal` aborts (a Native operation's deadline),
   * instead of refusing at once. Quotas and rate limits still refuse at once.
   */
  waitForCapacity?: boolean;
  /** Volumes to mount (ECW `volumeMounts`, Native `volumes`); validated by volume-service.ts. */
  volumeMounts?: VolumeMountRequest[];
}


export interface PlacementInput {
  nodeGroup?: string;
  nodeSelector?: Record<string, string>;
}


/** Upper bound of any sandbox lifetime from now (E2B: 24 h for Pro). */
export const MAX_TIMEOUT_SEC = LIMITS.timeoutSec.max;

export function validateResources(r: { vcpu: number; memoryMib: number; diskMib: number }, rootfsSizeMib: number | null, templateId: string): void {
  for (const [name, v] of [["vcpu", r.vcpu], ["memory_mib", r.memoryMib], ["disk_mib", r.diskMib]] as const) {
    if (!Number.isInteger(v) || v <= 0) throw invalid(`${name}=${v} must be a positive integer`, { field: name });
  }
  if (r.memoryMib < 64) throw invalid(`memory_mib=${r.memoryMib} is below the minimum of 64 MiB`, { field: "memory_mib" });
  if (rootfsSizeMib !== null && r.diskMib < rootfsSizeMib) {
    throw invalid(
      `disk_mib=${r.diskMib} is smaller than the rootfs size ${rootfsSizeMib} MiB of template ${templateId}`,
      { field: "disk_mib", rootfsSizeMib },
    );
  }
}

/** A lifetime from now; `min` 0 only where 0 changes nothing (refreshes never shorten). */
export function validateTimeout(sec: number, min: number = LIMITS.timeoutSec.min): void {
  if (!Number.isFinite(sec) || sec < min || sec > MAX_TIMEOUT_SEC) {
    throw invalid(`timeout=${sec} must be between ${min} and ${MAX_TIMEOUT_SEC} seconds`, { field: "timeout" });
  }
}

/** allow_internet_access=false, or denyOut containing 0.0.0.0/0 with no allowOut, means no egress. */
export function effectiveInternetAccess(rec: Pick<SandboxRecord, "allowInternetAccess" | "network">): boolean {
  if (!rec.allowInternetAccess) return false;
  const deny = rec.network?.denyOut ?? [];
  const allow = rec.network?.allowOut ?? [];
  if (deny.includes("0.0.0.0/0") && allow.length === 0) return false;
  return true;
}

/** Metadata key carrying placement constraints (ECW has no body field for them). */
export const PLACEMENT_METADATA_KEY = "space.placement";

const LABEL_KEY = /^[A-Za-z0-9._/-]{1,253}$/;
const LABEL_VALUE = /^[A-Za-z0-9._-]{0,63}$/;

/** A metadata value that carries JSON (`space.placement`, `space.resources`); a parse error names the key and an example. */
export function parseMetadataJson(key: string, raw: string, example: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    throw invalid(`metadata '${key}' must be JSON like ${example} (got ${raw.slice(0, 100)})`, { field: key });
  }
}

/** `{"node_group": "gpu", "node_selector": {"zone": "a"}}` → PlacementInput; names the offending part. */
export function parsePlacement(raw: string | undefined): PlacementInput {
  if (raw === undefined) return {};
  const v = parseMetadataJson(PLACEMENT_METADATA_KEY, raw, '{"node_group":"gpu","node_selector":{"zone":"a"}}');
  if (!v || typeof v !== "object" || Array.isArray(v)) throw invalid(`metadata '${PLACEMENT_METADATA_KEY}' must be a JSON object`, { field: PLACEMENT_METADATA_KEY });
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== "node_group" && k !== "node_selector") throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': unknown field '${k}' (node_group, node_selector)`, { field: PLACEMENT_METADATA_KEY });
  }
  const out: PlacementInput = {};
  if (o.node_group !== undefined) {
    if (typeof o.node_group !== "string" || !/^[A-Za-z0-9._-]{1,63}$/.test(o.node_group)) {
      throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': node_group must be 1-63 letters, digits, . _ -`, { field: PLACEMENT_METADATA_KEY });
    }
    out.nodeGroup = o.node_group;
  }
  if (o.node_selector !== undefined) {
    const sel = o.node_selector;
    if (!sel || typeof sel !== "object" || Array.isArray(sel)) throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': node_selector must be an object of label → value`, { field: PLACEMENT_METADATA_KEY });
    const s: Record<string, string> = {};
    for (const [k, val] of Object.entries(sel)) {
      if (!LABEL_KEY.test(k) || typeof val !== "string" || !LABEL_VALUE.test(val)) {
        throw invalid(`metadata '${PLACEMENT_METADATA_KEY}': node_selector entry ${k}=${String(val)} is not a valid label`, { field: PLACEMENT_METADATA_KEY });
      }
      s[k] = val;
    }
    if (Object.keys(s).length) out.nodeSelector = s;
  }
  return out;
}
