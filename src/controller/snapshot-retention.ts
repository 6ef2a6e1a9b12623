/**
 * Snapshot retention (leader only): every interval, snapshots no restore can want any
 * more are deleted — their blob parts (and anything else under their blob prefix, e.g. a
 * failed upload's partial part) and the node's local copy.
 *
 * 1. Expire: superseded suspend snapshots, those of ended sandboxes and abandoned fork
 *    checkpoints become `deleted` (never the newest suspend snapshot of a live sandbox,
 *    never a named one; store/snapshots.ts expireSnapshots).
 * 2. Claim: `deleted`/`failed` rows older than the minimum age and not held by a restore
 *    move to `reaping` (retention_restore_source_guard: a restore holds its source row
 *    first, and a claimed row refuses new holds).
 * 3. Finish forward: every `reaping` row — this sweep's and any a crashed sweeper left —
 *    has its blobs deleted and becomes `reaped` (retention_claim_finish_forward: a
 *    failure leaves it `reaping` for the next sweep, never restorable again).
 */
import type { BlobStore } from "../blob/blob-store.ts";
import { SpaceError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import { claimExpiredSnapshots, expireSnapshots, listReapingSnapshots, markSnapshotReaped, type ReapingSnapshot } from "../store/snapshots.ts";
import type { Substrate } from "../substrate/substrate.ts";
import { Periodic } from "../core/periodic.ts";

export interface SnapshotRetentionDeps {
  db: Db;
  blobs: BlobStore;
  /** Frees nodes' local copies (best effort: a node that is gone frees nothing). */
  substrate: Pick<Substrate, "dropSnapshot">;
  log: Logger;
  minAgeMs: number;
  intervalMs: number;
  /** Rows handled per sweep. Default 200. */
  batch?: number;
}

export interface SweepResult {
  expired: string[];
  reaped: string[];
  failed: { id: string; error: string }[];
}

export async function sweepSnapshots(deps: Omit<SnapshotRetentionDeps, "intervalMs">): Promise<SweepResult> {
  const batch = deps.batch ?? 200;
  const expired = await expireSnapshots(deps.db, deps.minAgeMs);
  await claimExpiredSnapshots(deps.db, deps.minAgeMs, batch);
  const out: SweepResult = { expired, reaped: [], failed: [] };
  for (const row of await listReapingSnapshots(deps.db, batch)) {
    try {
      await reapOne(deps, row);
      out.reaped.push(row.id);
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      out.failed.push({ id: row.id, error: `${err.code}: ${err.message}` });
      deps.log.warn({ snapshotId: row.id, err: e }, "snapshot retention: deletion failed; the next sweep finishes it");
    }
  }
  if (out.expired.length || out.reaped.length || out.failed.length) deps.log.info(out, "snapshot retention sweep");
  return out;
}

async function reapOne(deps: Omit<SnapshotRetentionDeps, "intervalMs">, row: ReapingSnapshot): Promise<void> {
  const signal = AbortSignal.timeout(120_000);
  const keys = new Set([...row.parts.map((p) => p.key), ...(await deps.blobs.list(`snapshots/${row.id}/`, signal))]);
  for (const key of keys) await deps.blobs.delete(key, signal);
  if (row.nodeId) {
    await deps.substrate.dropSnapshot(row.nodeId, row.id, signal).catch((e: unknown) =>
      deps.log.warn({ snapshotId: row.id, nodeId: row.nodeId, err: e }, "snapshot retention: could not free the node's local copy"),
    );
  }
  await markSnapshotReaped(deps.db, row.id);
}

export function startSnapshotRetention(deps: SnapshotRetentionDeps): { stop(): Promise<void> } {
  const loop = new Periodic(deps.intervalMs, async () => {
    await sweepSnapshots(deps).catch((e: unknown) => deps.log.warn({ err: e }, "snapshot retention sweep failed"));
  });
  loop.start();
  return loop;
}
