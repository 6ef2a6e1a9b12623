/**
 * Forced drain (`POST /admin/api/v1/nodes/:id/drain {mode: forced}`): the node is already
 * marked draining (placement excludes it), then every running or paused resident is moved
 * by the sandbox service (suspend with the parts published to the blob store, durability
 * checked, restore on another node keeping id, disk and memory). A few move at once; each
 * one's outcome is reported, and one that cannot move stays on the node with the reason.
 * Residents in other states (creating, killing, …) are reported `skipped`, untouched.
 */
import type { NodeId } from "../../core/ids.ts";
import type { Logger } from "../../core/log.ts";
import type { Db } from "../../store/db.ts";
import { listSandboxesOnNode, residentStates } from "../../store/sandboxes.ts";
import type { EvacuationOutcome, SandboxService } from "../../sandboxes/service.ts";

export interface Evacuation {
  moved: number;
  stayed: number;
  sandboxes: EvacuationOutcome[];
  /** Volumes moved off the node (unattached ones), and those left (held by a sandbox there, or failed). */
  volumes: { moved: string[]; stayed: string[] };
}

const MOVABLE = new Set(["running", "paused"]);

export async function evacuateNode(
  deps: { db: Db; sandboxes: SandboxService; log: Logger; concurrency?: number },
  nodeId: string,
  signal: AbortSignal,
): Promise<Evacuation> {
  const rows = await listSandboxesOnNode(deps.db, nodeId as NodeId, residentStates);
  const outcomes: EvacuationOutcome[] = [];
  const queue = rows.filter((r) => MOVABLE.has(r.state));
  for (const r of rows) {
    if (!MOVABLE.has(r.state)) outcomes.push({ sandboxId: r.id, outcome: "skipped", reason: `sandbox is ${r.state}; only running or paused sandboxes are moved`, durationMs: 0 });
  }
  deps.log.info({ node: nodeId, movable: queue.length, skipped: outcomes.length }, "forced drain: evacuating");
  const worker = async () => {
    for (let r = queue.shift(); r; r = queue.shift()) {
      if (signal.aborted) {
        outcomes.push({ sandboxId: r.id, outcome: "stayed", reason: "the evacuation deadline passed before it was moved", durationMs: 0 });
        continue;
      }
      const o = await deps.sandboxes.evacuate(r.id, nodeId);
      if (o.outcome !== "moved") deps.log.warn({ node: nodeId, ...o }, "forced drain: sandbox not moved");
      outcomes.push(o);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, deps.concurrency ?? 3) }, worker));
  const moved = outcomes.filter((o) => o.outcome === "moved").length;
  // Then the volumes no sandbox holds any more: through the blob store to other nodes.
  const volumes = deps.sandboxes.volumes ? await deps.sandboxes.volumes.evacuate(nodeId, signal) : { moved: [], stayed: [] };
  deps.log.info({ node: nodeId, moved, stayed: outcomes.length - moved, volumesMoved: volumes.moved.length, volumesStayed: volumes.stayed.length }, "forced drain: evacuation finished");
  return { moved, stayed: outcomes.length - moved, sandboxes: outcomes, volumes };
}
