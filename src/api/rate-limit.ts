/**
 * The create rate limiter: one token bucket per tenant and one per credential (API key or
 * bearer token), kept in a database (`BucketStore`: every API replica takes from the same
 * row). Limits are the tenant's quotas (defaults from config, admin overrides).
 *
 * A create does not wait on the database for its token: each replica leases a batch of
 * tokens from the shared bucket (LEASE_S of the rate, at most the burst) and spends them
 * in process, taking the next batch in the background when half is spent; a lease unused
 * for IDLE_MS goes back to the bucket. Every token spent was taken from the shared bucket,
 * so the skew is bounded: at any moment a replica holds at most one lease of a key, so the
 * fleet admits at most the bucket's allowance plus one lease per replica, and holds back at
 * most as much from the others. A create finds no token at hand only at a key's first use
 * (or when the bucket is short): it then waits for one take, as without leases. A rate too
 * low for a lease of two tokens takes each token from the bucket (exact).
 *
 * When the bucket store fails or is slow, creates are let through (fail open: a limiter
 * outage must not become an API outage), counted in `space_rate_limiter_fail_open_total`
 * and logged once per interval, not per request.
 */
import { createHash } from "node:crypto";
import { Counter, type Registry } from "prom-client";
import { SpaceError } from "../core/errors.ts";
import type { TenantId } from "../core/ids.ts";
import type { Logger } from "../core/log.ts";
import { Recent } from "../core/recent.ts";
import { openDb, redactUrl, type Db } from "../store/db.ts";
import { migrate } from "../store/migrate.ts";
import { takeBucketTokens, type BucketTake } from "../store/rate-buckets.ts";
import { effectiveQuotas, getQuotaOverrides, type QuotaLimits } from "../store/tenant-quotas.ts";

/** Where buckets live; `take` may throw (the limiter then fails open). */
export interface BucketStore {
  /** Up to `want` tokens, after giving `giveBack` unused ones back (store/rate-buckets.ts). */
  take(key: string, ratePerS: number, burst: number, want: number, giveBack: number): Promise<BucketTake>;
}

/** Buckets in a database: the main one, or a separate URL opened (and migrated) on first use. */
export class DbBucketStore implements BucketStore {
  #db: Promise<Db> | null;
  /** After a failed open, no new attempt before this time (each create must not wait for a dead server). */
  #retryAt = 0;

  constructor(
    db: Db | null,
    private readonly url = "",
    private readonly retryOpenMs = 5_000,
  ) {
    this.#db = db ? Promise.resolve(db) : null;
  }

  async take(key: string, ratePerS: number, burst: number, want: number, giveBack: number): Promise<BucketTake> {
    return takeBucketTokens(await this.#open(), key, ratePerS, burst, want, giveBack);
  }

  #open(): Promise<Db> {
    if (this.#db) return this.#db;
    if (Date.now() < this.#retryAt) throw new SpaceError("unavailable", `rate-limit database ${redactUrl(this.url)} is unreachable; next attempt later`);
    const opening = openDb(this.url).then(async (db) => {
      await migrate(db);
      return db;
    });
    this.#db = opening;
    opening.catch(() => {
      this.#db = null;
      this.#retryAt = Date.now() + this.retryOpenMs;
    });
    return opening;
  }

  /** Closes a database this store opened itself. */
  async close(owned: boolean): Promise<void> {
    if (owned && this.#db) await (await this.#db.catch(() => null))?.close();
  }
}

export interface RateLimiterDeps {
  store: BucketStore;
  /** The main database (tenant overrides). */
  db: Db;
  defaults: QuotaLimits;
  metrics: Registry;
  log: Logger;
  /** A take slower than this fails open (default 2 s). */
  takeTimeoutMs?: number;
  /** At most one fail-open log line per this many ms (default 60 s). */
  failOpenLogIntervalMs?: number;
}

/** How long a tenant's limits are believed (an admin change reaches every replica within it). */
const LIMITS_CACHE_MS = 1000;
/** A lease is this many seconds of a key's rate (at most its burst). */
const LEASE_S = 0.25;
/** A lease unused this long goes back to the shared bucket. */
const IDLE_MS = 1000;

/** A replica's tokens of one key, taken from the shared bucket ahead of its creates. */
interface Lease {
  held: number;
  /** The take in flight (at most one per key): its answer, or the store's failure. */
  refill: Promise<BucketTake & { wanted: number } | Error> | null;
  usedAt: number;
  ratePerS: number;
  burst: number;
}

export class CreateRateLimiter {
  readonly #d: RateLimiterDeps;
  readonly #limits = new Recent<Promise<QuotaLimits>>(LIMITS_CACHE_MS);
  readonly #failOpen: Counter;
  readonly #refused: Counter;
  #lastFailOpenLog = 0;
  #failOpenSinceLog = 0;
  readonly #leases = new Map<string, Lease>();
  #sweeper: NodeJS.Timeout | null = null;

  constructor(d: RateLimiterDeps) {
    this.#d = d;
    this.#failOpen = new Counter({
      name: "space_rate_limiter_fail_open_total",
      help: "creates let through because the rate limiter's bucket store failed or was slow",
      registers: [d.metrics],
    });
    this.#refused = new Counter({
      name: "space_rate_limited_total",
      help: "creates refused by a rate limit (429), by bucket scope",
      labelNames: ["scope"],
      registers: [d.metrics],
    });
  }

  /**
   * Takes a create from the tenant's and the credential's buckets, or throws
   * `resource_exhausted` (detail `rate_limited`, `details.retryAfterS` from the bucket).
   */
  async admit(tenantId: TenantId, credential: string | null): Promise<void> {
    const limits = await this.#limitsOf(tenantId);
    await this.#take("tenant", `tenant:${tenantId}`, limits.createsPerS, limits.createBurst);
    if (credential) await this.#take("key", `key:${createHash("sha256").update(credential).digest("hex").slice(0, 32)}`, limits.keyCreatesPerS, limits.keyCreateBurst);
  }

  #limitsOf(tenantId: TenantId): Promise<QuotaLimits> {
    let p = this.#limits.get(tenantId);
    if (!p) {
      p = getQuotaOverrides(this.#d.db, tenantId).then((o) => effectiveQuotas(this.#d.defaults, o));
      p.catch(() => this.#limits.delete(tenantId));
      this.#limits.set(tenantId, p);
    }
    return p;
  }

  async #take(scope: "tenant" | "key", key: string, ratePerS: number, burst: number): Promise<void> {
    if (ratePerS <= 0) return;
    const size = leaseSize(ratePerS, burst);
    if (size < 2) {
      const taken = await this.#fromStore(key, ratePerS, burst, 1, 0);
      if (taken instanceof Error) return this.#noteFailOpen(taken);
      if (taken.granted < 1) this.#refuse(scope, ratePerS, burst, taken.tokens);
      return;
    }
    const lease = this.#leaseOf(key, ratePerS, burst);
    while (lease.held < 1) {
      const taken = await (lease.refill ??= this.#refill(key, lease));
      if (taken instanceof Error) return this.#noteFailOpen(taken);
      if (lease.held >= 1) break;
      // The bucket had fewer than were asked for and others here took what came: it is empty.
      if (taken.granted < taken.wanted) this.#refuse(scope, ratePerS, burst, taken.tokens);
    }
    lease.held--;
    lease.usedAt = Date.now();
    if (lease.held < leaseSize(lease.ratePerS, lease.burst) / 2) lease.refill ??= this.#refill(key, lease);
  }

  #leaseOf(key: string, ratePerS: number, burst: number): Lease {
    let lease = this.#leases.get(key);
    if (!lease) {
      lease = { held: 0, refill: null, usedAt: Date.now(), ratePerS, burst };
      this.#leases.set(key, lease);
      this.#sweeper ??= setInterval(() => this.#sweep(), IDLE_MS).unref();
    }
    // An admin change of the limits applies from the next take on.
    lease.ratePerS = ratePerS;
    lease.burst = burst;
    return lease;
  }

  /** Tops the lease up to its size in one take; never rejects (a failure is the answer). */
  #refill(key: string, lease: Lease): Promise<BucketTake & { wanted: number } | Error> {
    const wanted = Math.max(1, leaseSize(lease.ratePerS, lease.burst) - lease.held);
    return this.#fromStore(key, lease.ratePerS, lease.burst, wanted, 0).then((taken) => {
      lease.refill = null;
      if (taken instanceof Error) return taken;
      lease.held += taken.granted;
      return { ...taken, wanted };
    });
  }

  /** Gives idle leases back to the shared bucket (background; a failed give-back only under-admits). */
  #sweep(): void {
    const idleSince = Date.now() - IDLE_MS;
    for (const [key, lease] of this.#leases) {
      if (lease.usedAt > idleSince || lease.refill) continue;
      this.#leases.delete(key);
      if (lease.held >= 1) void this.#fromStore(key, lease.ratePerS, lease.burst, 0, lease.held);
    }
    if (this.#leases.size === 0 && this.#sweeper) {
      clearInterval(this.#sweeper);
      this.#sweeper = null;
    }
  }

  /** Gives every lease back (shutdown); the limiter still works afterwards. */
  async close(): Promise<void> {
    if (this.#sweeper) clearInterval(this.#sweeper);
    this.#sweeper = null;
    const leases = [...this.#leases];
    this.#leases.clear();
    await Promise.all(
      leases.map(async ([key, l]) => {
        await l.refill; // what a take in flight brings goes back too
        if (l.held >= 1) await this.#fromStore(key, l.ratePerS, l.burst, 0, l.held);
      }),
    );
  }

  /** One take from the store, bounded by the take timeout; a failure is returned, not thrown. */
  #fromStore(key: string, ratePerS: number, burst: number, want: number, giveBack: number): Promise<BucketTake | Error> {
    return withTimeout(this.#d.store.take(key, ratePerS, burst, want, giveBack), this.#d.takeTimeoutMs ?? 2_000).catch((e: unknown) => SpaceError.from(e));
  }

  #refuse(scope: "tenant" | "key", ratePerS: number, burst: number, tokens: number): never {
    this.#refused.inc({ scope });
    const retryAfterS = Math.max(1, Math.ceil((1 - tokens) / ratePerS));
    throw new SpaceError("resource_exhausted", `rate limit exceeded: ${ratePerS} creates per second per ${scope === "tenant" ? "tenant" : "API key"} (burst ${burst}); retry in ${retryAfterS} s`, {
      retryable: true,
      detail: "rate_limited",
      details: { limit: scope === "tenant" ? "creates_per_s" : "key_creates_per_s", retryAfterS },
    });
  }

  #noteFailOpen(e: unknown): void {
    this.#failOpen.inc();
    this.#failOpenSinceLog++;
    const now = Date.now();
    if (now - this.#lastFailOpenLog < (this.#d.failOpenLogIntervalMs ?? 60_000)) return;
    this.#d.log.warn({ reason: SpaceError.from(e).message, failedOpen: this.#failOpenSinceLog }, "rate limiter store unavailable: letting creates through (fail open)");
    this.#lastFailOpenLog = now;
    this.#failOpenSinceLog = 0;
  }
}

/** Tokens a replica leases of a key at once (below 2: no lease, each create takes its own). */
function leaseSize(ratePerS: number, burst: number): number {
  return Math.min(burst, Math.floor(ratePerS * LEASE_S));
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new SpaceError("deadline_exceeded", `rate limiter store did not answer within ${ms} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e: unknown) => (clearTimeout(t), reject(e)),
    );
  });
}
