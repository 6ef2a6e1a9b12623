/** Decoding of the ECW list query (e2b-wire.md §2 "List query"). */
import { invalid } from "../../core/errors.ts";
import { unstorable } from "../../core/limits.ts";
import type { SandboxState } from "../../sandboxes/model.ts";

/**
 * The SDK encodes metadata three times: `{'a b':'c&d'}` arrives (after the framework's
 * one query decode) as `a%2520b=c%2526d`. Decode once more as a query string, then
 * decode each key and value. Every pair must match exactly (AND).
 */
export function decodeMetadataFilter(param: string | undefined): Record<string, string> {
  if (!param) return {};
  const out: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(param)) {
    let key: string, value: string;
    try {
      key = decodeURIComponent(k);
      value = decodeURIComponent(v);
    } catch {
      throw invalid(`metadata filter ${JSON.stringify(param).slice(0, 120)} is not URL-encoded key=value pairs`, { field: "metadata" });
    }
    // The decodes above can produce what the framework's check of the raw query could not see.
    const why = unstorable(key) ?? unstorable(value);
    if (why !== undefined) throw invalid(`metadata filter: a key or value ${why}`, { field: "metadata" });
    out[key] = value;
  }
  return out;
}

/** `running,paused` → the internal states each stands for; absent = both. */
export function decodeStateFilter(param: string | string[] | undefined): SandboxState[] {
  const values = (Array.isArray(param) ? param : param ? [param] : [])
    .flatMap((s) => s.split(","))
    .map((s) => s.trim())
    .filter(Boolean);
  const wanted = values.length ? values : ["running", "paused"];
  const out = new Set<SandboxState>();
  for (const v of wanted) {
    if (v === "running") {
      for (const st of ["creating", "running", "resuming", "stopping", "stopped"] as const) out.add(st);
    } else if (v === "paused") {
      for (const st of ["pausing", "paused", "suspending", "suspended"] as const) out.add(st);
    } else {
      throw invalid(`state '${v}' is not one of running, paused`, { field: "state" });
    }
  }
  return [...out];
}
