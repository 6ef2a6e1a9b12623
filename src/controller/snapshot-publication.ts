/**
 * Snapshot publication, forward (leader only). A pause answers once its capture is safe on
 * the node and publishes the parts behind the answer in the process that paused
 * (sandboxes/lifecycle.ts `publishLocal`). When that process dies first (a restart), or the
 * publication failed, the snapshot would stay `local` for good and no other node could
 * restore the sandbox. Every interval the leader publishes each such snapshot older than
 * `minAgeMs` from its node; the node shares one upload per snapshot, so a publication still
 * running elsewhere is joined, not repeated.
 */
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import { listUnpublishedSuspendSnapshots } from "../store/snapshots.ts";
import type { SandboxService } from "../sandboxes/service.ts";
import { Periodic } from "../core/periodic.ts";

export interface SnapshotPublicationDeps {
  db: Db;
  sandboxes: Pick<SandboxService, "publishLocal">;
  log: Logger;
  minAgeMs: number;
  intervalMs: number;
  /** Snapshots published per pass (one at a time: each is a whole upload). Default 20. */
  batch?: number;
}

/** One pass: the ids it made durable and those it could not (they stay `local` for the next pass). */
export async function publishLeftLocal(deps: Omit<SnapshotPublicationDeps, "intervalMs">): Promise<{ published: string[]; failed: string[] }> {
  const out = { published: [] as string[], failed: [] as string[] };
  for (const s of await listUnpublishedSuspendSnapshots(deps.db, deps.minAgeMs, deps.batch ?? 20)) {
    (await deps.sandboxes.publishLocal(s.sandboxId, s.nodeId, s.id) ? out.published : out.failed).push(s.id);
  }
  if (out.published.length || out.failed.length) deps.log.info(out, "snapshot publication: snapshots left local published again");
  return out;
}

export function startSnapshotPublication(deps: SnapshotPublicationDeps): { stop(): Promise<void> } {
  const loop = new Periodic(deps.intervalMs, async () => {
    await publishLeftLocal(deps).catch((e: unknown) => deps.log.warn({ err: e }, "snapshot publication pass failed"));
  });
  loop.start();
  return loop;
}
