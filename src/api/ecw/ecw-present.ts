/** SandboxRecord → the ECW JSON shapes the SDK reads (e2b-wire.md §2). */
import type { SandboxMetrics } from "../../contract/node-api.ts";
import type { SandboxLogEntry } from "../../contract/envd-logs.ts";
import { endAtOf, networkOf, startedAtOf, type SandboxRecord, type SandboxState } from "../../sandboxes/model.ts";
import { assertNever } from "../../core/errors.ts";
import type { VolumeMount } from "../../sandboxes/volume-service.ts";
import { toEcwMount } from "./volume-mounts.ts";

/** Any value >= 0.6.4 unlocks every SDK feature; < 0.1.0 makes the SDK kill the sandbox. */
export const ENVD_VERSION = "0.6.13";
/** `clientID` is required by the SDK and meaningless here. */
const CLIENT_ID = "space";

export interface PresentOptions {
  /** SPACE_SANDBOX_DOMAIN, or null (the SDK then relies on sandboxUrl). */
  domain: string | null;
}

/** ECW knows `running` and `paused`; a suspended sandbox is E2B-paused. */
export function toEcwState(s: SandboxState): "running" | "paused" {
  switch (s) {
    case "creating":
    case "running":
    case "resuming":
    case "stopping":
    case "stopped":
    case "killing":
    case "killed":
    case "failed":
      return "running";
    case "pausing":
    case "paused":
    case "suspending":
    case "suspended":
      return "paused";
    default:
      return assertNever(s);
  }
}

export function toSandbox(r: SandboxRecord, o: PresentOptions) {
  return {
    sandboxID: r.id,
    templateID: r.templateId ?? "",
    clientID: CLIENT_ID,
    envdVersion: ENVD_VERSION,
    ...(r.envdAccessToken ? { envdAccessToken: r.envdAccessToken } : {}),
    trafficAccessToken: r.trafficAccessToken,
    domain: o.domain,
    ...(r.alias ? { alias: r.alias } : {}),
  };
}

/** `mounts`: the volumes the sandbox was created with (volume-mounts.ts). */
export function toListedSandbox(r: SandboxRecord, mounts: readonly VolumeMount[] = []) {
  return {
    sandboxID: r.id,
    templateID: r.templateId ?? "",
    ...(r.alias ? { alias: r.alias } : {}),
    clientID: CLIENT_ID,
    cpuCount: r.vcpu,
    memoryMB: r.memoryMib,
    diskSizeMB: r.diskMib,
    startedAt: startedAtOf(r).toISOString(),
    endAt: endAtOf(r).toISOString(),
    state: toEcwState(r.state),
    envdVersion: ENVD_VERSION,
    metadata: r.metadata,
    volumeMounts: mounts.map(toEcwMount),
  };
}

export function toSandboxDetail(r: SandboxRecord, mounts: readonly VolumeMount[], o: PresentOptions) {
  return {
    ...toListedSandbox(r, mounts),
    // SDK 1.x connect() takes the envd token from here (it has no connect endpoint).
    ...(r.envdAccessToken ? { envdAccessToken: r.envdAccessToken } : {}),
    allowInternetAccess: r.allowInternetAccess,
    domain: o.domain,
    ...(networkOf(r) ? { network: r.network } : {}),
    lifecycle: { onTimeout: r.lifecycle.onTimeout, autoResume: r.lifecycle.autoResume },
  };
}

/** v1's `logs` entry: `line` is the entry as one JSON object, as E2B's envd lines are (the CLI parses `level` and `logger` from it). */
export function toSandboxLogLine(e: SandboxLogEntry) {
  return { timestamp: e.timestamp, line: JSON.stringify({ ...e.fields, level: e.level, message: e.message }) };
}

export function toSandboxMetric(m: SandboxMetrics) {
  const t = new Date(m.timestamp);
  return {
    timestamp: t.toISOString(),
    timestampUnix: Math.floor(t.getTime() / 1000),
    cpuCount: m.cpuCount,
    cpuUsedPct: m.cpuUsedPct,
    memUsed: m.memUsed,
    memTotal: m.memTotal,
    memCache: m.memCache,
    diskUsed: m.diskUsed,
    diskTotal: m.diskTotal,
  };
}
