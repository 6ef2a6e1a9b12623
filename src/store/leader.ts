/**
 * Leader election on a lease row (works on Postgres and PGlite alike): the holder renews
 * `leases.expires_at` every `leaseMs / 3`; anyone may take the row once it has expired.
 * Time is the database's clock (`now()`), so host clock skew does not matter.
 *
 * Safety: a leader that cannot renew (database unreachable, slow) demotes itself when its
 * own lease would have expired by its local monotonic clock, before anyone else can take
 * it (others wait for the database-side expiry, which is at least as late). `epoch`
 * increases on every change of holder and can fence writes.
 */
import type { Db } from "./db.ts";

/** Where the lease lives: the store's lease row (default) or, on Kubernetes, a coordination.k8s.io Lease. */
export interface LeaseBackend {
  /** Takes or renews `name` for `holder`; the current epoch when `holder` holds it now, else undefined. */
  tryAcquire(name: string, holder: string, leaseMs: number): Promise<{ epoch: number } | undefined>;
  /** Gives it up if `holder` holds it. */
  release(name: string, holder: string): Promise<void>;
}

export function storeLeaseBackend(db: Db): LeaseBackend {
  return {
    tryAcquire: (name, holder, leaseMs) => tryAcquireLease(db, name, holder, leaseMs),
    release: (name, holder) => releaseLease(db, name, holder),
  };
}

export type LeaderElectionOptions = ({ db: Db; backend?: undefined } | { backend: LeaseBackend; db?: undefined }) & LeaderElectionCommon;

interface LeaderElectionCommon {
  /** Lease name, e.g. `controller`. */
  name: string;
  /** This contender's identity (unique per process). */
  holder: string;
  /** Lease duration; renewals every leaseMs/3. */
  leaseMs: number;
  /** Called when this contender becomes leader (awaited before the next renewal). */
  onElected?: (info: { epoch: number }) => void | Promise<void>;
  /** Called when it stops being leader (lost lease, error, or stop()). */
  onDemoted?: () => void | Promise<void>;
  /** Renewal/attempt errors (the loop keeps going). */
  onError?: (e: unknown) => void;
  /** Default leaseMs/3. */
  renewEveryMs?: number;
}

export interface LeaderElection {
  isLeader(): boolean;
  /** Current epoch while leader, else null. */
  epoch(): number | null;
  /** Stops campaigning; a leader demotes itself and releases the lease (others take over at once). */
  stop(): Promise<void>;
  /** Stops without releasing (tests: simulates a crashed leader). */
  abandon(): Promise<void>;
}

interface LeaseRow {
  holder: string;
  epoch: number;
}

/** One attempt to take or renew the lease; returns the row when `holder` holds it now. */
export async function tryAcquireLease(db: Db, name: string, holder: string, leaseMs: number): Promise<LeaseRow | undefined> {
  return db.maybeOne<LeaseRow>(
    `INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
     ON CONFLICT (name) DO UPDATE SET
       holder = EXCLUDED.holder,
       expires_at = EXCLUDED.expires_at,
       renewed_at = now(),
       acquired_at = CASE WHEN leases.holder = EXCLUDED.holder THEN leases.acquired_at ELSE now() END,
       epoch = CASE WHEN leases.holder = EXCLUDED.holder THEN leases.epoch ELSE leases.epoch + 1 END
     WHERE leases.holder = EXCLUDED.holder OR leases.expires_at < now()
     RETURNING holder, epoch`,
    [name, holder, leaseMs],
  );
}

/** Gives the lease up if `holder` holds it (others can take it at once). */
export async function releaseLease(db: Db, name: string, holder: string): Promise<void> {
  await db.execute(`UPDATE leases SET expires_at = now() - interval '1 millisecond' WHERE name = $1 AND holder = $2`, [name, holder]);
}

/** Who holds a lease now (unexpired), if anyone. */
export async function currentLeaseHolder(db: Db, name: string): Promise<{ holder: string; epoch: number; expiresAt: Date } | undefined> {
  return db.maybeOne(`SELECT holder, epoch, expires_at AS "expiresAt" FROM leases WHERE name = $1 AND expires_at > now()`, [name]);
}

export async function startLeaderElection(o: LeaderElectionOptions): Promise<LeaderElection> {
  const renewEveryMs = o.renewEveryMs ?? Math.max(10, Math.floor(o.leaseMs / 3));
  const backend = o.backend ?? storeLeaseBackend(o.db);
  let leader = false;
  let epoch: number | null = null;
  /** Local monotonic deadline of our lease (from the start of the last successful renewal). */
  let validUntil = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();

  const demote = async () => {
    if (!leader) return;
    leader = false;
    epoch = null;
    try {
      await o.onDemoted?.();
    } catch (e) {
      o.onError?.(e);
    }
  };

  const tick = async () => {
    const startedAt = performance.now();
    try {
      const row = await backend.tryAcquire(o.name, o.holder, o.leaseMs);
      if (stopped) return;
      if (row) {
        validUntil = startedAt + o.leaseMs;
        if (!leader) {
          leader = true;
          epoch = row.epoch;
          try {
            await o.onElected?.({ epoch: row.epoch });
          } catch (e) {
            o.onError?.(e);
          }
        }
      } else {
        await demote();
      }
    } catch (e) {
      o.onError?.(e);
      // Cannot tell whether we still hold it: keep leading only while our lease surely holds.
      if (leader && performance.now() >= validUntil - renewEveryMs) await demote();
    }
  };

  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick().finally(schedule);
    }, renewEveryMs);
  };

  running = tick().finally(schedule);
  await running;

  const halt = async (release: boolean) => {
    if (stopped) return;
    stopped = true;
    if (timer) clearTimeout(timer);
    await running.catch(() => {});
    const wasLeader = leader;
    await demote();
    if (release && wasLeader) await backend.release(o.name, o.holder).catch((e: unknown) => o.onError?.(e));
  };

  return {
    isLeader: () => leader,
    epoch: () => epoch,
    stop: () => halt(true),
    abandon: () => halt(false),
  };
}
