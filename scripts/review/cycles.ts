/**
 * Area e, create/kill cycles: N ECW creates each killed at once (two at a time), then
 * every host object named after one of them must be gone within 10 s (host-objects.ts).
 */
import { createEcw, killEcw } from "./clients.ts";
import { hostObjects, leaked, type HostObjects, type Scope } from "./host-objects.ts";
import { Tally, type AreaResult } from "./report.ts";
import type { ReviewStack } from "./review-stack.ts";

export async function cycles(stack: ReviewStack, scope: Scope, baseline: HostObjects, n: number): Promise<AreaResult> {
  const started = Date.now();
  const t = new Tally();
  t.measure("tried", "serverErrors", "leaks");
  const ids = new Set<string>();
  const one = async () => {
    t.add("tried");
    try {
      const sb = await createEcw(stack.ep, stack.ep.apiKey, 120);
      ids.add(sb.sandboxID);
      const status = await killEcw(stack.ep, sb.sandboxID);
      if (status !== 204) t.find(status >= 500 || status === 0 ? "serverErrors" : "leaks", `kill ${sb.sandboxID} → ${status}`);
    } catch (e) {
      t.find("serverErrors", (e as Error).message);
    }
  };
  for (let i = 0; i < n; i += 2) await Promise.all([one(), ...(i + 1 < n ? [one()] : [])]);
  const end = Date.now() + 10_000;
  let left = leaked(baseline, hostObjects(scope, ids));
  while (left.length && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 500));
    left = leaked(baseline, hostObjects(scope, ids));
  }
  for (const l of left) t.find("leaks", `${l}${[...ids].some((id) => l.includes(id)) ? " (a cycle's sandbox)" : ""}`);
  return t.result("cycles", `e. ${n} create/kill cycles`, started);
}
