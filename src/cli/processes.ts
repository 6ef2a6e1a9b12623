/**
 * The processes of SPACE, each built from one config: the API (ECW, Native, Admin and
 * the gateway), the controller, the node agent. `space up` runs all three in one
 * process on a shared database; `space api|controller|node` run one each.
 */
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import type { Config } from "../core/config.ts";
import { parseClusterKey } from "../core/envelope.ts";
import { SpaceError } from "../core/errors.ts";
import { createLogger, resolveLogFormat, type Logger } from "../core/log.ts";
import { createMetricsRegistry, spaceMetrics } from "../core/metrics.ts";
import { startTracing, type Tracing } from "../core/tracing.ts";
import { openDb, redactUrl, type Db } from "../store/db.ts";
import { migrate } from "../store/migrate.ts";
import { openBlobStore } from "../blob/open.ts";
import type { BlobStore } from "../blob/blob-store.ts";
import { createApiApp, METRICS_REFUSED, metricsAllowed } from "../api/app.ts";
import { registerDashboardRoutes } from "../api/dashboard/dashboard-routes.ts";
import { registerAdminRoutes } from "../api/admin/admin-routes.ts";
import { registerNodeAdminRoutes } from "../api/admin/nodes.ts";
import { evacuateNode } from "../api/admin/evacuate.ts";
import { registerWarmPoolAdminRoutes } from "../api/admin/warm-pools.ts";
import { StoreApiKeys, authenticateBearer, bearerOf } from "../api/auth.ts";
import { createSandboxLayer, type SandboxLayer } from "../sandboxes/index.ts";
import { volumeDomain } from "../sandboxes/volume-service.ts";
import { StoreNodeDirectory, templateBinding } from "../sandboxes/queries.ts";
import { DirectSubstrate } from "../substrate/direct/direct-substrate.ts";
import { CachedNodeDirectory } from "../substrate/cached-node-directory.ts";
import { believedCapacityLedger, capacitySettings, storeCapacityLedger } from "../substrate/capacity.ts";
import type { Substrate } from "../substrate/substrate.ts";
import { registerEcwRoutes } from "../api/ecw/ecw-routes.ts";
import { registerNativeRoutes } from "../api/native/native-routes.ts";
import { createGateway, type Gateway, type LocalNode } from "../api/gateway/gateway.ts";
import { registerEcwTemplateRoutes } from "../api/ecw/ecw-templates.ts";
import { BuildCoordinator } from "../templates/build-coordinator.ts";
import { createCensusMetrics, readCensus, type CensusMetrics } from "../controller/census.ts";
import { createWarmPoolAdoption, warmPoolDefaults, type WarmPoolAdoption } from "../controller/warm-pools/index.ts";
import { parseSelector } from "../core/selector.ts";
import { quotaDefaults } from "../store/tenant-quotas.ts";
import { CreateRateLimiter, DbBucketStore } from "../api/rate-limit.ts";
import { registerTenantQuotaRoutes } from "../api/admin/tenant-quotas.ts";
import { closeGracefully } from "../core/http-close.ts";

/** What every control-plane component shares inside one process. */
export interface ControlPlane {
  config: Config;
  log: Logger;
  metrics: Registry;
  db: Db;
  blobs: BlobStore;
  adminToken: string;
  internalToken: string;
  /** The one sandbox service (with its substrate) shared by ECW, Native, gateway and controller. */
  layer: SandboxLayer;
  /** Warm-pool adoption the layer's service was built with (its creates adopt ready members). */
  warmPools: WarmPoolAdoption;
  /** Environment placement census metrics (fed by placement, reported by the leader). */
  census: CensusMetrics;
  /** OpenTelemetry (null = off); shut down last, so the stop's own spans are exported. */
  tracing: Tracing | null;
}

export interface Running {
  stop(): Promise<void>;
}

export function databaseUrl(config: Config): string {
  return config.SPACE_DATABASE_URL || `pglite:${join(config.SPACE_DATA_DIR, "db")}`;
}

/**
 * Tracing first (the logger's trace-id mixin needs to know), then the process's logger:
 * JSON, or pretty for a person at a terminal (SPACE_LOG_FORMAT).
 */
export async function processTelemetry(config: Config, processName: string): Promise<{ log: Logger; tracing: Tracing | null }> {
  const tracing = await startTracing(config, processName);
  const log = createLogger(config.SPACE_LOG_LEVEL, processName, resolveLogFormat(config.SPACE_LOG_FORMAT, process.stdout.isTTY === true));
  return { log, tracing };
}

export async function openControlPlane(
  config: Config,
  secrets: { adminToken: string; internalToken: string },
  processName: string,
): Promise<ControlPlane> {
  const { log, tracing } = await processTelemetry(config, processName);
  mkdirSync(config.SPACE_DATA_DIR, { recursive: true, mode: 0o700 });
  const url = databaseUrl(config);
  log.info({ database: redactUrl(url) }, "opening database");
  const db = await openDb(url);
  try {
    const m = await migrate(db);
    if (m.applied.length) log.info({ applied: m.applied }, "migrations applied");
    await assertSubstrate(db, config.SPACE_SUBSTRATE);
    const blobs = openBlobStore(config);
    const metrics = createMetricsRegistry(processName);
    const census = createCensusMetrics(metrics, log);
    let warmPools: WarmPoolAdoption | undefined;
    const quotas = quotaDefaults(config);
    const layer = createSandboxLayer({
      db,
      log,
      quotas,
      defaults: { vcpu: config.SPACE_DEFAULT_VCPU, memoryMib: config.SPACE_DEFAULT_MEMORY_MIB, diskMib: config.SPACE_DEFAULT_DISK_MIB },
      ...(config.SPACE_SUBSTRATE === "kubernetes"
        ? await kubernetesSubstrateOf(config, log, secrets.internalToken, census.onGate)
        : { substrate: directSubstrateOf(config, db, secrets.internalToken, census.onGate) }),
      metrics: spaceMetrics(metrics).sandboxes,
      volumeDefaultMib: config.SPACE_VOLUME_DEFAULT_MIB,
      warmPools: (members, parts) => (warmPools = createWarmPoolAdoption({ db, config, metrics, log, quotas }, members, parts)),
    });
    if (!warmPools) throw new SpaceError("internal", "the sandbox layer was built without its warm-pool adoption");
    return { config, log, metrics, census, db, blobs, layer, warmPools, tracing, ...secrets };
  } catch (e) {
    await db.close();
    await tracing?.shutdown();
    throw e;
  }
}

/** SPACE_SUBSTRATE=direct: node agents register in the store; placement here, over those nodes. */
function directSubstrateOf(config: Config, db: Db, internalToken: string, onGate: CensusMetrics["onGate"]): Substrate {
  const maxAge = config.SPACE_PLACEMENT_DIRECTORY_MAX_AGE_MS;
  return new DirectSubstrate({
    nodes: maxAge ? new CachedNodeDirectory(new StoreNodeDirectory(db), maxAge) : new StoreNodeDirectory(db),
    internalToken,
    gate: config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
    selectorExtras: parseSelector(config.SPACE_PLACEMENT_NODE_SELECTOR),
    onGate,
    ledger: maxAge ? believedCapacityLedger(storeCapacityLedger(db), maxAge) : storeCapacityLedger(db),
    capacity: capacitySettings(config),
  });
}

/** SPACE_SUBSTRATE=kubernetes: sandboxes are pods placed by kube-scheduler on the Nodes node agents register (src/substrate/kubernetes). */
async function kubernetesSubstrateOf(config: Config, log: Logger, internalToken: string, onGate: CensusMetrics["onGate"]) {
  const { createKubeApi } = await import("../kube/kube-api.ts");
  const { KubernetesSubstrate } = await import("../substrate/kubernetes/kubernetes-substrate.ts");
  const { KubeNodeDirectory } = await import("../substrate/kubernetes/kube-node-directory.ts");
  const kube = createKubeApi(config.SPACE_KUBE_CONFIG ? { kind: "kubeconfig", path: config.SPACE_KUBE_CONFIG } : { kind: "in-cluster" });
  const substrate = new KubernetesSubstrate({
    kube,
    namespace: config.SPACE_KUBE_NAMESPACE,
    internalToken,
    gate: config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
    selectorExtras: parseSelector(config.SPACE_PLACEMENT_NODE_SELECTOR),
    onGate,
    scheduleDeadlineMs: config.SPACE_KUBE_READY_DEADLINE_MS,
    readinessDeadlineMs: config.SPACE_KUBE_READY_DEADLINE_MS,
    log: log.child({ component: "substrate" }),
  });
  return { substrate, nodes: new KubeNodeDirectory(kube) };
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

/**
 * The API server (ECW, Native, Admin) and the sandbox gateway. `localSandboxDomain`
 * (`space up`): without SPACE_SANDBOX_DOMAIN, create answers name
 * `localhost:<gateway port>` (defaultSandboxDomain); a separate `space api` answers
 * `domain: null` then, so clients keep their own (E2B_DOMAIN).
 */
export async function startApiServer(
  cp: ControlPlane,
  opts: { localSandboxDomain?: boolean; localNode?: LocalNode } = {},
): Promise<{ app: FastifyInstance; url: string; gateway: Gateway; gatewayUrl: string; sandboxDomain: string | null; stop(): Promise<void> }> {
  const { config, db, log, layer } = cp;
  // The gateway first: the default sandbox domain names its port.
  const tls = gatewayTls(config);
  const gateway = createGateway({
    sandboxes: layer.sandboxes,
    sandboxDomain: config.SPACE_SANDBOX_DOMAIN || null,
    log,
    tls,
    metrics: spaceMetrics(cp.metrics).gateway,
    ...(opts.localNode ? { localNode: opts.localNode } : {}),
  });
  const gatewayPort = await gateway.listen(config.SPACE_GATEWAY_PORT, config.SPACE_API_HOST);
  const sandboxDomain = config.SPACE_SANDBOX_DOMAIN || (opts.localSandboxDomain ? defaultSandboxDomain(gatewayPort) : null);
  const gatewayUrl = config.SPACE_PUBLIC_GATEWAY_URL || `${tls ? "https" : "http"}://${config.SPACE_API_HOST}:${gatewayPort}`;
  const apiKeys = new StoreApiKeys(db);
  const builds = new BuildCoordinator({ db, substrate: layer.substrate, nodes: layer.nodes, internalToken: cp.internalToken, log, metrics: spaceMetrics(cp.metrics).builds, ecrEndpoint: config.SPACE_REGISTRY_ECR_ENDPOINT });
  const quotas = quotaDefaults(config);
  const buckets = new DbBucketStore(config.SPACE_RATE_LIMIT_DATABASE_URL ? null : db, config.SPACE_RATE_LIMIT_DATABASE_URL);
  const limiter = new CreateRateLimiter({ store: buckets, db, defaults: quotas, metrics: cp.metrics, log: log.child({ component: "rate-limit" }) });
  const capacityRetryAfterS = config.SPACE_CAPACITY_RETRY_AFTER_S;
  const surfaces: Array<(app: FastifyInstance) => void | Promise<void>> = [
    (a) => registerAdminRoutes(a, { db, adminToken: cp.adminToken }),
    (a) => registerTenantQuotaRoutes(a, { db, adminToken: cp.adminToken, defaults: quotas }),
    (a) =>
      registerNodeAdminRoutes(a, {
        db,
        adminToken: cp.adminToken,
        internalToken: cp.internalToken,
        log,
        evacuate: (nodeId, signal) => evacuateNode({ db, sandboxes: layer.sandboxes, log }, nodeId, signal),
        sandboxes: layer.sandboxes,
        labelPrefixes: config.SPACE_NODE_LABEL_PREFIXES.split(","),
        capacity: capacitySettings(config),
      }),
    (a) => registerWarmPoolAdminRoutes(a, { db, adminToken: cp.adminToken, defaults: warmPoolDefaults(config) }),
    (a) =>
      registerEcwRoutes(a, {
        sandboxes: layer.sandboxes,
        apiKeys,
        sandboxDomain,
        log,
        limiter,
        capacityRetryAfterS,
        volumeDomain: volumeDomain(config.SPACE_PUBLIC_API_URL),
      }),
    (a) => registerEcwTemplateRoutes(a, { db, blobs: cp.blobs, builds, apiKeys, log, snapshots: layer.sandboxes }),
    (a) =>
      registerDashboardRoutes(a, {
        db,
        sandboxes: layer.sandboxes,
        adminToken: cp.adminToken,
        sandboxUrl: gatewayUrl,
        gate: config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
        census: () => readCensus({ db, binding: (t) => templateBinding(db, t), nodes: layer.nodes }),
      }),
    (a) =>
      registerNativeRoutes(a, {
        db,
        sandboxes: layer.sandboxes,
        log,
        authenticate: (req) => authenticateBearer(db, bearerOf(req), cp.adminToken),
        builds,
        limiter,
      }),
  ];
  let app: FastifyInstance;
  let url: string;
  try {
    app = await createApiApp({ db, log, metrics: cp.metrics, surfaces, metricsToken: config.SPACE_METRICS_TOKEN, capacityRetryAfterS });
    url = await app.listen({ host: config.SPACE_API_HOST, port: config.SPACE_API_PORT });
  } catch (e) {
    await gateway.close();
    throw e;
  }
  await builds.resume();
  return {
    app,
    url,
    gateway,
    gatewayUrl,
    sandboxDomain,
    async stop() {
      await gateway.close();
      await closeGracefully(() => app.close(), app.server);
      await builds.close();
      // Leased tokens back to the shared bucket, before its database closes.
      await limiter.close().catch(() => undefined);
      await buckets.close(config.SPACE_RATE_LIMIT_DATABASE_URL !== "");
    },
  };
}

/** The gateway's certificate and key, read once at start; both or neither. */
function gatewayTls(config: Config): { cert: Buffer; key: Buffer } | null {
  const { SPACE_GATEWAY_TLS_CERT: certPath, SPACE_GATEWAY_TLS_KEY: keyPath } = config;
  if (!certPath && !keyPath) return null;
  if (!certPath || !keyPath) {
    throw new SpaceError("invalid_argument", `SPACE_GATEWAY_TLS_CERT and SPACE_GATEWAY_TLS_KEY go together; only ${certPath ? "SPACE_GATEWAY_TLS_CERT" : "SPACE_GATEWAY_TLS_KEY"} is set`);
  }
  const read = (name: string, path: string) => {
    try {
      return readFileSync(path);
    } catch (e: unknown) {
      throw new SpaceError("invalid_argument", `${name}=${path} cannot be read: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
    }
  };
  return { cert: read("SPACE_GATEWAY_TLS_CERT", certPath), key: read("SPACE_GATEWAY_TLS_KEY", keyPath) };
}

/**
 * `<port>-<id>.localhost:<gateway port>` for getHost() when `space up` runs without SPACE_SANDBOX_DOMAIN:
 * every name under `localhost` is loopback (RFC 6761; glibc through nss-myhostname, which
 * scripts/setup.sh installs; browsers on their own), so public ports work on this machine
 * with nothing configured. The gateway routes such a Host by its `<port>-<id>` label.
 */
export function defaultSandboxDomain(gatewayPort: number): string {
  return `localhost:${gatewayPort}`;
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
  const api = await startApiServer(cp);
  cp.log.info({ url: api.url, gateway: api.gatewayUrl }, "api listening");
  return async () => {
    await api.stop();
    await cp.db.close();
    await cp.tracing?.shutdown();
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
  const metrics = config.SPACE_CONTROLLER_METRICS_PORT ? await serveMetrics(cp, config.SPACE_CONTROLLER_METRICS_PORT) : undefined;
  return async () => {
    await metrics?.close();
    await controller.stop();
    await cp.db.close();
    await cp.tracing?.shutdown();
  };
}

/** `GET /metrics` of a process without an API server (the controller: census, dispatcher, fleet gauges). */
export async function serveMetrics(cp: ControlPlane, port: number): Promise<{ close(): Promise<void> }> {
  const { createServer } = await import("node:http");
  const server = createServer((req, res) => {
    if (req.method !== "GET" || req.url !== "/metrics") {
      res.writeHead(404).end();
      return;
    }
    if (!metricsAllowed(cp.config.SPACE_METRICS_TOKEN, req.headers.authorization)) {
      res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify(METRICS_REFUSED));
      return;
    }
    cp.metrics.metrics().then(
      (body) => res.writeHead(200, { "content-type": cp.metrics.contentType }).end(body),
      (e: unknown) => res.writeHead(500).end(String(e)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, cp.config.SPACE_API_HOST, resolve);
  });
  cp.log.info({ url: `http://${cp.config.SPACE_API_HOST}:${port}/metrics` }, "controller metrics listening");
  return { close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

export async function runNode(config: Config): Promise<() => Promise<void>> {
  const token = requireSecret(config, "SPACE_INTERNAL_TOKEN");
  const { startStandaloneNode } = await import("../node/ctl/standalone.ts");
  const { log, tracing } = await processTelemetry(config, "node");
  const stop = await startStandaloneNode(config, token, log, createMetricsRegistry("node"));
  return async () => {
    await stop();
    await tracing?.shutdown();
  };
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

/** `space rotate-key`: re-wraps stored data keys from SPACE_ENCRYPTION_KEY_PREVIOUS to SPACE_ENCRYPTION_KEY (rotate-key.ts). */
export async function runRotateKey(config: Config): Promise<void> {
  const to = parseClusterKey(config.SPACE_ENCRYPTION_KEY);
  const from = parseClusterKey(config.SPACE_ENCRYPTION_KEY_PREVIOUS);
  if (!to || !from) {
    throw new SpaceError("invalid_argument", `space rotate-key needs the new key in SPACE_ENCRYPTION_KEY and the old one in SPACE_ENCRYPTION_KEY_PREVIOUS (missing: ${[!to && "SPACE_ENCRYPTION_KEY", !from && "SPACE_ENCRYPTION_KEY_PREVIOUS"].filter(Boolean).join(", ")})`);
  }
  const log = createLogger(config.SPACE_LOG_LEVEL, "rotate-key");
  const db = await openDb(databaseUrl(config));
  const blob = openBlobStore(config);
  try {
    const { rotateKeys } = await import("./rotate-key.ts");
    const r = await rotateKeys({ db, blob, from, to });
    log.info({ rewrapped: r.rewrapped, current: r.current, unknown: r.unknown.length, raced: r.raced.length }, "key rotation pass done");
    process.stdout.write(`re-wrapped ${r.rewrapped} data keys; ${r.current} already under the new key\n`);
    for (const w of r.raced) process.stdout.write(`changed while re-wrapping (run again): ${w}\n`);
    for (const w of r.unknown) process.stdout.write(`wrapped by neither key (left as is): ${w}\n`);
    if (r.unknown.length || r.raced.length) {
      throw new SpaceError("failed_precondition", `${r.unknown.length} data keys fit neither key and ${r.raced.length} changed meanwhile: not every data key is under the new key yet`);
    }
  } finally {
    await blob.close();
    await db.close();
  }
}
