/**
 * Versioned migrations: `migrations/NNN-name.sql`, applied in order, each in its own
 * transaction, recorded in `schema_migrations`. Idempotent (applied versions are skipped);
 * concurrent migrators on one Postgres are serialized by a session advisory lock, so two
 * processes starting together never apply a migration twice.
 */
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { SpaceError } from "../core/errors.ts";
import type { Db, Queryable } from "./db.ts";

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Arbitrary constant: the advisory-lock key of SPACE migrations ("SPACEMIG"). */
const MIGRATION_LOCK_KEY = 0x5350_4d49;

export const migrationsDir = fileURLToPath(new URL("./migrations/", import.meta.url));

export function loadMigrations(dir = migrationsDir): Migration[] {
  const out: Migration[] = [];
  for (const file of readdirSync(dir).sort()) {
    const m = /^(\d{3,})-([a-z0-9-]+)\.sql$/.exec(file);
    if (!m) continue;
    out.push({ version: Number(m[1]), name: m[2]!, sql: readFileSync(join(dir, file), "utf8") });
  }
  for (let i = 1; i < out.length; i++) {
    if (out[i]!.version === out[i - 1]!.version) throw new SpaceError("internal", `two migrations with version ${out[i]!.version}`);
  }
  return out;
}

export interface MigrateResult {
  /** Versions applied by this call. */
  applied: number[];
  /** Highest version in the database afterwards. */
  version: number;
}

export async function migrate(db: Db, migrations: Migration[] = loadMigrations()): Promise<MigrateResult> {
  return db.session(async (s) => {
    await s.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK_KEY]);
    try {
      await s.script(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
      const done = new Set((await s.query<{ version: number }>("SELECT version FROM schema_migrations")).map((r) => r.version));
      const known = Math.max(0, ...migrations.map((m) => m.version));
      const newest = Math.max(0, ...done);
      if (newest > known) {
        throw new SpaceError(
          "failed_precondition",
          `database schema version ${newest} is newer than this build knows (${known}); upgrade space before starting it on this database`,
        );
      }
      const applied: number[] = [];
      for (const m of migrations) {
        if (done.has(m.version)) continue;
        await inTransaction(s, async () => {
          await s.script(m.sql);
          await s.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [m.version, m.name]);
        }).catch((e: unknown) => {
          throw new SpaceError("internal", `migration ${m.version}-${m.name} failed: ${(e as Error).message}`, { cause: e });
        });
        applied.push(m.version);
      }
      return { applied, version: Math.max(newest, ...applied) };
    } finally {
      await s.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK_KEY]).catch(() => {});
    }
  });
}

async function inTransaction(s: Queryable, fn: () => Promise<void>): Promise<void> {
  await s.script("BEGIN");
  try {
    await fn();
    await s.script("COMMIT");
  } catch (e) {
    await s.script("ROLLBACK").catch(() => {});
    throw e;
  }
}

/** The schema version of a database (0 = never migrated). */
export async function schemaVersion(db: Queryable): Promise<number> {
  const t = await db.maybeOne<{ exists: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS exists");
  if (!t?.exists) return 0;
  const r = await db.one<{ v: number | null }>("SELECT max(version) AS v FROM schema_migrations");
  return r.v ?? 0;
}
