/**
 * The create rate limiter: one token bucket per tenant and one per credential (API key or
 * bearer token), kept in a database (`BucketStore`: every API replica takes from the same
 * row, so the limit holds across replicas with no skew beyond the database's clock).
 * Limits are the tenant's quotas (defaults from config, admin overrides).
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
import { takeBucketToken, type BucketTake } from "../store/rate-buckets.ts";
import { effectiveQuotas, getQuotaOverrides, type QuotaLimits } from "../store/tenant-quotas.ts";

/** Where buckets live; `take` may throw (the limiter then fails open). */
export interface BucketStore {
  take(key: string, ratePerS: number, burst: number): Promise<BucketTake>;
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

  async take(key: string, ratePerS: number, burst: number): Promise<BucketTake> {
    return takeBucketToken(await this.#open(), key, ratePerS, burst);
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

export class CreateRateLimiter {
  readonly #d: RateLimiterDeps;
  readonly #limits = new Recent<Promise<QuotaLimits>>(LIMITS_CACHE_MS);
  readonly #failOpen: Counter;
  readonly #refused: Counter;
  #lastFailOpenLog = 0;
  #failOpenSinceLog = 0;

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
    let taken: BucketTake;
    try {
      taken = await withTimeout(this.#d.store.take(key, ratePerS, burst), this.#d.takeTimeoutMs ?? 2_000);
    } catch (e: unknown) {
      this.#noteFailOpen(e);
      return;
    }
    if (taken.allowed) return;
    this.#refused.inc({ scope });
    const retryAfterS = Math.max(1, Math.ceil((1 - taken.tokens) / ratePerS));
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

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new SpaceError("deadline_exceeded", `rate limiter store did not answer within ${ms} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e: unknown) => (clearTimeout(t), reject(e)),
    );
  });
}
