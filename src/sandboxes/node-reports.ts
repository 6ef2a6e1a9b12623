/**
 * What a node reports about its sandboxes, made the records' truth (issue 27 items 7, 2).
 *
 * Restart: a node agent reconciles at start (adopts the containers that survived,
 * reclaims half-made ones), then reports the sandboxes it kept; every record placed on it
 * that needs the node (being created, running, paused, …) but is not among them becomes
 * `failed` with a reason, at once, instead of staying `creating`/`running` with nothing
 * behind it. A create still in flight on another process loses its row this way; its own
 * `creating → running` then finds the row gone and kills what it made (creation.ts). A
 * record left `killing` is `killed` (the node reclaimed what remained).
 *
 * Unhealthy: the node's watchdog (node/sandboxes/sandbox-health.ts) found a running
 * sandbox whose envd no longer answers; the record becomes `failed` with the node's
 * reason before the node kills it, so callers see why instead of waiting on it.
 *
 * Both announce `ended`, so the gateway drops its cached route at once.
 */
import type { Logger } from "../core/log.ts";
import type { NodeId, SandboxId } from "../core/ids.ts";
import type { Db } from "../store/db.ts";
import { listSandboxesOnNode, type SandboxState } from "../store/sandboxes.ts";
import type { SandboxService } from "./service.ts";

/** The parts of the service a report moves. */
export type ReportTarget = Pick<SandboxService, "repo" | "events">;

/** States whose sandbox exists only while the node has it. */
export const needsNode: readonly SandboxState[] = ["creating", "running", "pausing", "paused", "suspending", "stopping", "resuming"];

/** Fails (or, when being killed, ends) the records on `nodeId` the node no longer has; returns their ids. */
export async function failMissingOnNode(db: Db, svc: ReportTarget, nodeId: string, kept: ReadonlySet<string>, log: Logger): Promise<string[]> {
  const failed: string[] = [];
  for (const s of await listSandboxesOnNode(db, nodeId as NodeId, needsNode)) {
    if (kept.has(s.id)) continue;
    const reason = `lost: node ${nodeId} restarted without this sandbox (it was ${s.state}; its processes are gone)`;
    if (await svc.repo.transition(s.id as SandboxId, needsNode, "failed", { failureMessage: reason })) failed.push(s.id);
  }
  for (const s of await listSandboxesOnNode(db, nodeId as NodeId, ["killing"])) {
    if (!kept.has(s.id) && (await svc.repo.transition(s.id as SandboxId, ["killing"], "killed"))) failed.push(s.id);
  }
  for (const id of failed) svc.events.emit("ended", id as SandboxId);
  if (failed.length) log.warn({ node: nodeId, failed }, "sandboxes the restarted node no longer has marked failed");
  return failed;
}

/**
 * A running sandbox on `nodeId` its node found unhealthy becomes `failed` with `reason`.
 * True when the record is failed now or was not running there anyway (the node may kill
 * it); false for an unknown sandbox (the node keeps it: not its to judge).
 */
export async function failUnhealthy(svc: ReportTarget, nodeId: string, sandboxId: string, reason: string, log: Logger): Promise<boolean> {
  const cur = await svc.repo.getById(sandboxId as SandboxId);
  if (!cur) return false;
  if (cur.nodeId !== nodeId || cur.state !== "running") return true;
  const r = await svc.repo.transition(cur.id, ["running"], "failed", { failureMessage: `unhealthy: ${reason}` });
  if (r) {
    svc.events.emit("ended", cur.id);
    log.warn({ node: nodeId, sandboxId, reason }, "sandbox reported unhealthy by its node: failed");
  }
  return true;
}
