/**
 * What happens to the sandboxes of a node that went silent: they are reported lost —
 * moved to `failed` with a reason naming the node and when it was last heard from — not
 * silently dropped. Stopped sandboxes keep their state (their rootfs is on the node's
 * disk and comes back with it); sandboxes still being created are left to their create,
 * which fails on its own.
 */
import type { Logger } from "../core/log.ts";
import type { SandboxId } from "../core/ids.ts";
import type { Db } from "../store/db.ts";
import type { NodeRecord } from "../store/nodes.ts";
import { listSandboxesOnNode, type SandboxState } from "../store/sandboxes.ts";
import type { SandboxRepo } from "../sandboxes/model.ts";

/** States whose sandbox needs its node alive: lost with it. */
export const lostWithNode: readonly SandboxState[] = ["running", "pausing", "paused", "suspending", "stopping", "resuming"];

export async function reportLostSandboxes(
  db: Db,
  repo: SandboxRepo,
  node: Pick<NodeRecord, "id" | "name" | "lastHeartbeatAt">,
  log: Logger,
): Promise<string[]> {
  const lost: string[] = [];
  const since = new Date(node.lastHeartbeatAt).toISOString();
  for (const s of await listSandboxesOnNode(db, node.id, lostWithNode)) {
    const reason = `lost: node ${node.name} (${node.id}) stopped heartbeating (last heard ${since}); the sandbox's processes and memory are gone with it`;
    const r = await repo.transition(s.id as SandboxId, lostWithNode, "failed", { failureMessage: reason });
    if (r) lost.push(s.id);
  }
  if (lost.length) log.warn({ node: node.id, name: node.name, lost }, "sandboxes reported lost with their node");
  return lost;
}
