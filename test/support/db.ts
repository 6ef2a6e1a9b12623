/**
 * Fresh databases for tests, on both engines.
 *
 * - PGlite: a new in-memory instance per call (always available).
 * - Postgres: when `SPACE_TEST_DATABASE_URL` is set (e.g. postgres://postgres@127.0.0.1:5432/postgres),
 *   a new database with a random name per call, dropped by `drop()`. When it is not set, the
 *   Postgres cases are skipped with `postgresSkipReason`.
 *
 * Usage (one conformance suite, both engines):
 *   for (const engine of testEngines()) {
 *     describe(`store on ${engine.name}`, { skip: engine.skip }, () => { ... freshDb(engine.name) ... });
 *   }
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { openDb, type Db, type Engine } from "../../src/store/db.ts";
import { migrate } from "../../src/store/migrate.ts";

export const postgresAdminUrl: string | undefined = process.env.SPACE_TEST_DATABASE_URL || undefined;
export const postgresSkipReason: string | false = postgresAdminUrl
  ? false
  : "SPACE_TEST_DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres): real-Postgres cases skipped";

export interface TestEngine {
  name: Engine;
  /** false, or why this engine's cases are skipped. */
  skip: string | false;
}

export function testEngines(): TestEngine[] {
  return [
    { name: "pglite", skip: false },
    { name: "postgres", skip: postgresSkipReason },
  ];
}

export interface TestDb {
  db: Db;
  /** URL of the database (Postgres) or "pglite:memory". */
  url: string;
  /** Opens another independent connection pool on the same database (Postgres only). */
  openAnother(): Promise<Db>;
  /** Closes every Db opened here and drops the database. Idempotent. */
  drop(): Promise<void>;
}

/** A fresh, migrated (unless `migrate: false`) database on `engine`. */
export async function freshDb(engine: Engine, opts: { migrate?: boolean } = {}): Promise<TestDb> {
  if (engine === "pglite") {
    const db = await openDb("pglite:memory");
    if (opts.migrate !== false) await migrate(db);
    let dropped = false;
    return {
      db,
      url: "pglite:memory",
      openAnother: () => Promise.reject(new Error("PGlite in memory is one instance; share `db`")),
      async drop() {
        if (dropped) return;
        dropped = true;
        await db.close();
      },
    };
  }
  if (!postgresAdminUrl) throw new Error(String(postgresSkipReason));
  const name = `space_test_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: postgresAdminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const u = new URL(postgresAdminUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  const opened: Db[] = [];
  const open = async () => {
    const d = await openDb(url);
    opened.push(d);
    return d;
  };
  const db = await open();
  if (opts.migrate !== false) await migrate(db);
  let dropped = false;
  return {
    db,
    url,
    openAnother: open,
    async drop() {
      if (dropped) return;
      dropped = true;
      for (const d of opened) await d.close().catch(() => {});
      const a = new pg.Client({ connectionString: postgresAdminUrl });
      await a.connect();
      try {
        await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await a.end();
      }
    },
  };
}

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes (never a bare sleep). */
export async function waitFor<T>(fn: () => T | Promise<T>, opts: { timeoutMs?: number; intervalMs?: number; what?: string } = {}): Promise<NonNullable<T>> {
  const deadline = Date.now() + (opts.timeoutMs ?? 5000);
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${opts.timeoutMs ?? 5000} ms waiting for ${opts.what ?? "condition"}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 10));
  }
}
