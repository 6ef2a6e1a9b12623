/** Label selectors in their config and CLI form `a=b,c=d` (node labels, placement extras). */
import { SpaceError } from "./errors.ts";

export function formatSelector(s: Record<string, string>): string {
  return Object.entries(s)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

/** `a=b,c=d` → {a: "b", c: "d"} (config and CLI form of a selector). */
export function parseSelector(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of s
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean)) {
    const i = part.indexOf("=");
    if (i <= 0) throw new SpaceError("invalid_argument", `selector entry '${part}' must be key=value`);
    out[part.slice(0, i)] = part.slice(i + 1);
  }
  return out;
}
