/**
 * The processes of SPACE, each built from one config: the API (ECW, Native, Admin and
 * the gateway), the controller, the node agent. `space up` runs all three in one
 * process on a shared database; `space api|controller|node` run one each.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import type { Config } from "../core/config.ts";
import { SpaceError } from "../core/errors.ts";
import { createLogger, type Logger } from "../core/log.ts";
import { createMetricsRegistry } from "../core/metrics.ts";
import { openDb, redactUrl, type Db } from "../store/db.ts";
import { migrate } from "../store/migrate.ts";
import { openBlobStore } from "../blob/open.ts";
import type { BlobStore } from "../blob/blob-store.ts";
import { createApiApp } from "../api/app.ts";
import { registerAdminRoutes } from "../api/admin/routes.ts";

/** What every control-plane component shares inside one process. */
export interface ControlPlane {
  config: Config;
  log: Logger;
  metrics: Registry;
  db: Db;
  blobs: BlobStore;
  adminToken: string;
  internalToken: string;
}

export interface Running {
  stop(): Promise<void>;
}

export function databaseUrl(config: Config): string {
  return config.SPACE_DATABASE_URL || `pglite:${join(config.SPACE_DATA_DIR, "db")}`;
}

export async function openControlPlane(
  config: Config,
  secrets: { adminToken: string; internalToken: string },
  processName: string,
): Promise<ControlPlane> {
  const log = createLogger(config.SPACE_LOG_LEVEL, processName);
  mkdirSync(config.SPACE_DATA_DIR, { recursive: true, mode: 0o700 });
  const url = databaseUrl(config);
  log.info({ database: redactUrl(url) }, "opening database");
  const db = await openDb(url);
  try {
    const m = await migrate(db);
    if (m.applied.length) log.info({ applied: m.applied }, "migrations applied");
    await assertSubstrate(db, config.SPACE_SUBSTRATE);
    const blobs = openBlobStore(config);
    return { config, log, metrics: createMetricsRegistry(processName), db, blobs, ...secrets };
  } catch (e) {
    await db.close();
    throw e;
  }
}

/** A cluster never switches substrate: the first start records it, later starts must match. */
async function assertSubstrate(db: Db, substrate: Config["SPACE_SUBSTRATE"]): Promise<void> {
  const { getClusterValue, setClusterValueIfAbsent } = await import("../store/cluster.ts");
  await setClusterValueIfAbsent(db, "substrate", substrate);
  const recorded = await getClusterValue(db, "substrate");
  if (recorded !== substrate) {
    throw new SpaceError(
      "failed_precondition",
      `SPACE_SUBSTRATE=${substrate} but this database belongs to a ${String(recorded)} cluster; a cluster never switches substrate`,
    );
  }
}

export async function startApiServer(
  cp: ControlPlane,
  surfaces: ReadonlyArray<(app: FastifyInstance) => void | Promise<void>>,
): Promise<{ app: FastifyInstance; url: string }> {
  const app = await createApiApp({
    db: cp.db,
    log: cp.log,
    metrics: cp.metrics,
    surfaces: [(a) => registerAdminRoutes(a, { db: cp.db, adminToken: cp.adminToken }), ...surfaces],
  });
  const address = await app.listen({ host: cp.config.SPACE_API_HOST, port: cp.config.SPACE_API_PORT });
  return { app, url: address };
}

function requireSecret(config: Config, name: "SPACE_ADMIN_TOKEN" | "SPACE_INTERNAL_TOKEN"): string {
  const v = config[name];
  if (v.length < 16) {
    throw new SpaceError(
      "invalid_argument",
      `${name} must be set (at least 16 characters) when the processes run separately; \`space up\` generates it for you`,
    );
  }
  return v;
}

export async function runApi(config: Config): Promise<() => Promise<void>> {
  const cp = await openControlPlane(
    config,
    { adminToken: requireSecret(config, "SPACE_ADMIN_TOKEN"), internalToken: requireSecret(config, "SPACE_INTERNAL_TOKEN") },
    "api",
  );
  const { app, url } = await startApiServer(cp, []);
  cp.log.info({ url }, "api listening");
  return async () => {
    await app.close();
    await cp.db.close();
  };
}

export async function runController(config: Config): Promise<() => Promise<void>> {
  const cp = await openControlPlane(
    config,
    { adminToken: requireSecret(config, "SPACE_ADMIN_TOKEN"), internalToken: requireSecret(config, "SPACE_INTERNAL_TOKEN") },
    "controller",
  );
  const { startController, controllerLoops } = await import("./controller.ts");
  const controller = await startController(cp, controllerLoops);
  return async () => {
    await controller.stop();
    await cp.db.close();
  };
}

export async function runNode(config: Config): Promise<() => Promise<void>> {
  requireSecret(config, "SPACE_INTERNAL_TOKEN");
  throw new SpaceError("unimplemented", "a standalone `space node` registering over HTTP arrives with the Direct fleet; use `space up` on one machine");
}

export async function runMigrate(config: Config): Promise<void> {
  const log = createLogger(config.SPACE_LOG_LEVEL, "migrate");
  const db = await openDb(databaseUrl(config));
  try {
    const m = await migrate(db);
    log.info({ applied: m.applied }, m.applied.length ? "migrations applied" : "schema up to date");
    process.stdout.write(`schema version ${m.version}${m.applied.length ? ` (applied ${m.applied.join(", ")})` : " (up to date)"}\n`);
  } finally {
    await db.close();
  }
}
