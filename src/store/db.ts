/**
 * One small query layer over two engines: real Postgres (`pg` Pool) and embedded PGlite.
 * Callers write one SQL text (parameterized, `$1…`) that runs on both.
 *
 * Value conventions (identical on both engines, so callers never branch):
 * - int8 / bigserial → `number` (our counters stay far below 2^53);
 * - jsonb → parsed value; pass jsonb params as `JSON.stringify(v)` with an explicit
 *   `$n::jsonb` cast (pg would turn a JS array into a Postgres array literal otherwise);
 * - timestamptz → `Date`; text[] → `string[]`; bytea → `Uint8Array` (a Buffer on pg).
 *
 * PGlite is one connection: every statement and transaction goes through one mutex, so
 * concurrent callers never interleave inside someone else's transaction. Inside
 * `transaction(fn)` use the `tx` handed to `fn`; calling `db` there would deadlock on
 * PGlite, so it is refused with an error instead.
 */
import { createHash } from "node:crypto";
import { AsyncLocalStorage } from "node:async_hooks";
import { mkdirSync } from "node:fs";
import pg from "pg";
import { PGlite, parse as pgliteParse, protocol, type Results } from "@electric-sql/pglite";
import { SpaceError } from "../core/errors.ts";

export type Row = Record<string, unknown>;

/** What a statement runs on: the pool, or one connection inside a transaction/session. */
export interface Queryable {
  /** Rows of one parameterized statement. */
  query<T = Row>(sql: string, params?: readonly unknown[]): Promise<T[]>;
  /** Exactly one row, else `not_found` (with `what` in the message). */
  one<T = Row>(sql: string, params?: readonly unknown[], what?: string): Promise<T>;
  /** Zero or one row. */
  maybeOne<T = Row>(sql: string, params?: readonly unknown[]): Promise<T | undefined>;
  /** Rows affected by one parameterized statement (UPDATE/DELETE/INSERT). */
  execute(sql: string, params?: readonly unknown[]): Promise<number>;
  /** Several statements, no parameters (migrations). */
  script(sql: string): Promise<void>;
}

export type Engine = "postgres" | "pglite";

export interface Db extends Queryable {
  readonly engine: Engine;
  /** READ COMMITTED transaction: COMMIT when `fn` resolves, ROLLBACK when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** One connection for `fn`, no transaction (session-level advisory locks). */
  session<T>(fn: (s: Queryable) => Promise<T>): Promise<T>;
  /** Calls `fn` with each NOTIFY payload on `channel`; resolves to an unsubscribe. */
  listen(channel: string, fn: (payload: string) => void): Promise<() => Promise<void>>;
  /** `pg_notify(channel, payload)`; inside a transaction use `notify(tx, …)` below. */
  notify(channel: string, payload: string): Promise<void>;
  close(): Promise<void>;
}

/** NOTIFY through any queryable (delivered at COMMIT when `q` is a transaction). */
export async function notify(q: Queryable, channel: string, payload: string): Promise<void> {
  await q.query("SELECT pg_notify($1, $2)", [channel, payload]);
}

/** One round trip to the database (readiness): throws when it cannot answer. */
export async function ping(q: Queryable): Promise<void> {
  await q.query("SELECT 1");
}

const CHANNEL_RE = /^[a-z_][a-z0-9_]{0,62}$/;
function checkChannel(channel: string): string {
  if (!CHANNEL_RE.test(channel)) throw new SpaceError("invalid_argument", `channel name ${JSON.stringify(channel)} must match ${CHANNEL_RE}`);
  return channel;
}

function withHelpers(base: {
  query<T>(sql: string, params?: readonly unknown[]): Promise<T[]>;
  execute(sql: string, params?: readonly unknown[]): Promise<number>;
  script(sql: string): Promise<void>;
}): Queryable {
  return {
    query: base.query,
    execute: base.execute,
    script: base.script,
    async one<T>(sql: string, params?: readonly unknown[], what = "row"): Promise<T> {
      const rows = await base.query<T>(sql, params);
      if (rows.length === 0) throw new SpaceError("not_found", `${what} not found`);
      if (rows.length > 1) throw new SpaceError("internal", `expected one ${what}, got ${rows.length}`);
      return rows[0]!;
    },
    async maybeOne<T>(sql: string, params?: readonly unknown[]): Promise<T | undefined> {
      const rows = await base.query<T>(sql, params);
      return rows[0];
    },
  };
}

/**
 * Picks the engine from the URL: `postgres://…` / `postgresql://…` → Postgres;
 * empty → PGlite in `dataDir` (created if missing); `pglite:<dir>` → PGlite in `<dir>`;
 * `pglite:memory` (or `memory://`) → in-memory PGlite (tests).
 */
export async function openDb(url: string, dataDir?: string): Promise<Db> {
  if (/^postgres(ql)?:\/\//.test(url)) return openPostgres(url);
  if (url === "pglite:memory" || url === "memory://") return openPglite(undefined);
  if (url.startsWith("pglite:")) return openPglite(url.slice("pglite:".length));
  if (url === "") {
    if (!dataDir) throw new SpaceError("invalid_argument", "no database URL and no data directory for PGlite");
    return openPglite(dataDir);
  }
  throw new SpaceError("invalid_argument", `database URL ${JSON.stringify(redactUrl(url))} is not postgres://…, pglite:<dir> or empty`);
}

export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, "//$1:***@");
}

// ---------------------------------------------------------------- Postgres

const INT8_OID = 20;
const INT8_ARRAY_OID = 1016;

export async function openPostgres(url: string, opts: { max?: number } = {}): Promise<Db> {
  const int8 = (v: string) => Number(v);
  const arrayParser = pg.types.getTypeParser(1007 as never) as (v: string) => unknown[]; // int4[] parser
  const types = {
    getTypeParser(oid: number, format?: "text" | "binary") {
      if (oid === INT8_OID) return int8;
      if (oid === INT8_ARRAY_OID) return (v: string) => arrayParser(v).map((x) => (x === null ? null : Number(x)));
      return pg.types.getTypeParser(oid, format as never);
    },
  };
  const pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10, types: types as never });
  // An idle client losing its connection must not crash the process; the pool replaces it.
  pool.on("error", () => {});
  try {
    const c = await pool.connect();
    c.release();
  } catch (e) {
    await pool.end().catch(() => {});
    throw new SpaceError("unavailable", `cannot connect to Postgres at ${redactUrl(url)}: ${(e as Error).message}`, { cause: e });
  }

  const on = (c: pg.Pool | pg.PoolClient): Queryable =>
    withHelpers({
      async query<T>(sql: string, params: readonly unknown[] = []) {
        const r = await c.query({ name: statementName(sql), text: sql, values: params as unknown[] });
        return r.rows as T[];
      },
      async execute(sql: string, params: readonly unknown[] = []) {
        const r = await c.query({ name: statementName(sql), text: sql, values: params as unknown[] });
        return r.rowCount ?? 0;
      },
      async script(sql: string) {
        await c.query(sql);
      },
    });

  const listener = new PgListener(url, types);
  const root = on(pool);
  return {
    engine: "postgres",
    ...root,
    async transaction(fn) {
      const c = await pool.connect();
      let broken = false;
      try {
        await c.query("BEGIN");
        const out = await fn(on(c));
        await c.query("COMMIT");
        return out;
      } catch (e) {
        await c.query("ROLLBACK").catch(() => (broken = true));
        throw e;
      } finally {
        c.release(broken);
      }
    },
    async session(fn) {
      const c = await pool.connect();
      let broken = false;
      try {
        return await fn(on(c));
      } catch (e) {
        // A session may hold session-level locks; drop the connection rather than reuse it dirty.
        broken = true;
        throw e;
      } finally {
        c.release(broken);
      }
    },
    listen: (channel, fn) => listener.listen(checkChannel(channel), fn),
    notify: (channel, payload) => notify(root, channel, payload),
    async close() {
      await listener.close();
      await pool.end();
    },
  };
}

/**
 * Every statement runs prepared under a name derived from its text: each connection parses
 * it once, not on every call (a fifth to a quarter less Postgres CPU per create, `npm run
 * bench -- control-plane api`).
 * Statement texts are constants or built from fixed column sets (never from values: those
 * are always parameters), so the set of names, and what each connection keeps, is bounded.
 */
const statementNames = new Map<string, string>();
function statementName(sql: string): string {
  let name = statementNames.get(sql);
  if (name === undefined) {
    name = `s_${createHash("sha256").update(sql).digest("base64url").slice(0, 22)}`;
    statementNames.set(sql, name);
  }
  return name;
}

/** One dedicated connection for LISTEN; reconnects with backoff and re-subscribes. */
class PgListener {
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  private readonly subs = new Map<string, Set<(payload: string) => void>>();
  private closed = false;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly url: string,
    private readonly types: unknown,
  ) {}

  async listen(channel: string, fn: (payload: string) => void): Promise<() => Promise<void>> {
    let set = this.subs.get(channel);
    const first = !set;
    if (!set) this.subs.set(channel, (set = new Set()));
    set.add(fn);
    const c = await this.ensure();
    if (first) await c.query(`LISTEN ${channel}`);
    return async () => {
      const s = this.subs.get(channel);
      if (!s) return;
      s.delete(fn);
      if (s.size === 0) {
        this.subs.delete(channel);
        await this.client?.query(`UNLISTEN ${channel}`).catch(() => {});
      }
    };
  }

  private ensure(): Promise<pg.Client> {
    if (this.client) return Promise.resolve(this.client);
    if (this.connecting) return this.connecting;
    this.connecting = (async () => {
      const c = new pg.Client({ connectionString: this.url, types: this.types as never });
      c.on("notification", (m) => {
        for (const fn of this.subs.get(m.channel) ?? []) {
          try {
            fn(m.payload ?? "");
          } catch {
            /* a subscriber's bug must not kill the listener */
          }
        }
      });
      c.on("error", () => this.lost(c));
      c.on("end", () => this.lost(c));
      try {
        await c.connect();
        for (const ch of this.subs.keys()) await c.query(`LISTEN ${ch}`);
      } catch (e) {
        await c.end().catch(() => {});
        throw e;
      } finally {
        this.connecting = undefined;
      }
      this.client = c;
      return c;
    })();
    return this.connecting;
  }

  private lost(c: pg.Client): void {
    if (this.client !== c) return;
    this.client = undefined;
    c.end().catch(() => {});
    if (this.closed || this.subs.size === 0) return;
    // Notifications sent while disconnected are lost; subscribers also poll (level-triggered).
    const retry = (delayMs: number) => {
      this.retryTimer = setTimeout(() => {
        if (this.closed) return;
        this.ensure().catch(() => retry(Math.min(delayMs * 2, 5000)));
      }, delayMs);
      this.retryTimer.unref();
    };
    retry(100);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const c = this.client ?? (await this.connecting?.catch(() => undefined));
    this.client = undefined;
    await c?.end().catch(() => {});
  }
}

// ---------------------------------------------------------------- PGlite

class Mutex {
  private tail: Promise<void> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn);
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

/**
 * PGlite's `query` parses, describes, binds, describes again, executes and syncs: six calls
 * into its WebAssembly Postgres per statement, the text parsed and planned each time. Here a
 * statement is parsed once under its name (as on Postgres, `statementName`) and each run is
 * one call: bind, describe, execute, sync (2-3x less time per simple statement, measured
 * against `query` on this machine). Results are parsed by PGlite's own parsers, as `query`'s.
 * `withBegin`: a transaction's BEGIN goes in the same call, ahead of its first statement (one call
 * less per transaction).
 */
function preparedRunner(pgl: PGlite) {
  const s = protocol.serialize;
  const paramTypes = new Map<string, number[]>();
  const call = (parts: Uint8Array[], syncToFs: boolean) => pgl.execProtocol(concatBytes(parts), { syncToFs });
  const begin = [s.parse({ text: "BEGIN" }), s.bind({}), s.execute({})];
  return async <T>(sql: string, params: readonly unknown[], syncToFs: boolean, withBegin = false) => {
    const name = statementName(sql);
    let types = paramTypes.get(sql);
    if (!types) {
      const described = await call([s.parse({ name, text: sql }), s.describe({ type: "S", name }), s.sync()], false);
      types = pgliteParse.parseDescribeStatementResults(described.messages);
      paramTypes.set(sql, types);
    }
    const values = params.map((p, i) => {
      if (p === null || p === undefined) return null;
      const serialize = pgl.serializers[types[i]!];
      return serialize ? serialize(p) : String(p);
    });
    const r = await call([...(withBegin ? begin : []), s.bind({ statement: name, values }), s.describe({ type: "P" }), s.execute({}), s.sync()], syncToFs);
    const results = pgliteParse.parseResults(r.messages, pgl.parsers);
    return (results[results.length - 1] ?? { rows: [], affectedRows: 0 }) as Results<T>;
  };
}

function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export async function openPglite(dataDir: string | undefined): Promise<Db> {
  if (dataDir) mkdirSync(dataDir, { recursive: true });
  let pgl: PGlite;
  try {
    pgl = await PGlite.create(dataDir ? { dataDir } : {});
  } catch (e) {
    throw new SpaceError("unavailable", `cannot open PGlite database in ${dataDir ?? "memory"}: ${(e as Error).message}`, { cause: e });
  }
  const mutex = new Mutex();
  // Marks async work running inside transaction()/session(), to refuse re-entry (deadlock).
  const inside = new AsyncLocalStorage<boolean>();
  const run = preparedRunner(pgl);
  /** A transaction's BEGIN not sent yet: it goes with the transaction's first statement. */
  let beginPending = false;
  const takeBegin = () => {
    const b = beginPending;
    beginPending = false;
    return b;
  };
  const on = (syncToFs: boolean, inTransaction: boolean): Queryable =>
    withHelpers({
      async query<T>(sql: string, params: readonly unknown[] = []) {
        return (await run<T>(sql, params, syncToFs, inTransaction && takeBegin())).rows;
      },
      async execute(sql: string, params: readonly unknown[] = []) {
        return (await run(sql, params, syncToFs, inTransaction && takeBegin())).affectedRows ?? 0;
      },
      async script(sql: string) {
        if (inTransaction && takeBegin()) await pgl.exec("BEGIN");
        await pgl.exec(sql);
      },
    });
  const raw = on(true, false);
  const inTx = on(false, true);
  const guard = () => {
    if (inside.getStore())
      throw new SpaceError("internal", "db used inside its own transaction/session: use the handle passed to the callback (PGlite has one connection)");
  };
  const locked = <A extends unknown[], R>(f: (...a: A) => Promise<R>) =>
    (...a: A): Promise<R> => {
      guard();
      return mutex.run(() => f(...a));
    };
  let closed = false;
  return {
    engine: "pglite",
    query: locked(raw.query) as Queryable["query"],
    one: locked(raw.one) as Queryable["one"],
    maybeOne: locked(raw.maybeOne) as Queryable["maybeOne"],
    execute: locked(raw.execute),
    script: locked(raw.script),
    transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
      guard();
      return mutex.run(() =>
        inside.run(true, async () => {
          beginPending = true;
          try {
            const out = await fn(inTx);
            // Nothing ran: nothing was begun.
            if (!takeBegin()) await raw.execute("COMMIT");
            return out;
          } catch (e) {
            if (!takeBegin()) await raw.execute("ROLLBACK").catch(() => {});
            throw e;
          }
        }),
      );
    },
    session<T>(fn: (s: Queryable) => Promise<T>): Promise<T> {
      guard();
      return mutex.run(() => inside.run(true, () => fn(raw)));
    },
    async listen(channel, fn) {
      checkChannel(channel);
      guard();
      const unsub = await mutex.run(() => pgl.listen(channel, fn));
      return async () => {
        if (closed) return;
        await mutex.run(() => unsub());
      };
    },
    notify: (channel, payload) => locked(() => notify(raw, channel, payload))(),
    async close() {
      if (closed) return;
      closed = true;
      await mutex.run(() => pgl.close());
    },
  };
}
