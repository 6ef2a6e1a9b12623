/**
 * What a restarted node really has, made the records' truth (issue 27 item 7). A node
 * agent reconciles at start (adopts the containers that survived, reclaims half-made
 * ones); it then reports the sandboxes it kept, and every record placed on it that needs
 * the node (being created, running, paused, …) but is not among them is moved to `failed`
 * with a reason, at once, instead of staying `creating`/`running` with nothing behind it.
 * A create still in flight on another process loses its row this way; its own
 * `creating → running` then finds the row gone and kills what it made (creation.ts). A
 * record left `killing` is `killed` (the node reclaimed what remained).
 */
import type { Logger } from "../core/log.ts";
import type { NodeId, SandboxId } from "../core/ids.ts";
import type { Db } from "../store/db.ts";
import { listSandboxesOnNode, type SandboxState } from "../store/sandboxes.ts";
import type { SandboxRepo } from "./model.ts";

/** States whose sandbox exists only while the node has it. */
export const needsNode: readonly SandboxState[] = ["creating", "running", "pausing", "paused", "suspending", "stopping", "resuming"];

/** Fails (or, when being killed, ends) the records on `nodeId` the node no longer has; returns their ids. */
export async function failMissingOnNode(db: Db, repo: SandboxRepo, nodeId: string, kept: ReadonlySet<string>, log: Logger): Promise<string[]> {
  const failed: string[] = [];
  for (const s of await listSandboxesOnNode(db, nodeId as NodeId, needsNode)) {
    if (kept.has(s.id)) continue;
    const reason = `lost: node ${nodeId} restarted without this sandbox (it was ${s.state}; its processes are gone)`;
    if (await repo.transition(s.id as SandboxId, needsNode, "failed", { reason })) failed.push(s.id);
  }
  // A kill the restart interrupted: the node reclaimed what was left, so it is done.
  for (const s of await listSandboxesOnNode(db, nodeId as NodeId, ["killing"])) {
    if (!kept.has(s.id) && (await repo.transition(s.id as SandboxId, ["killing"], "killed"))) failed.push(s.id);
  }
  if (failed.length) log.warn({ node: nodeId, failed }, "sandboxes the restarted node no longer has marked failed");
  return failed;
}
