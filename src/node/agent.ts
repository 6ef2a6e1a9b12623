/**
 * The node agent (`space node`, and part of `space up`): node cache, templates, network
 * slots, runtime, sandbox manager, node-api and node-ctl, wired from the config.
 *
 *   const agent = createNodeAgent(config, logger, { publish });
 *   await agent.start();                 // cache, base template, reconcile, heartbeat
 *   await agent.app.listen({ host: config.SPACE_NODE_HOST, port: config.SPACE_NODE_PORT });
 *   ...
 *   await agent.stop();                  // sandboxes keep running; the next start adopts them
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { cpus, hostname, totalmem } from "node:os";
import { dirname, isAbsolute, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import type { Config } from "../core/config.ts";
import type { Logger } from "../core/log.ts";
import { ensureTmpfs } from "../core/tmpfs.ts";
import { createRuntime, favorCgroupMigrations, RUNTIME_REGENERATED_FILES, type Runtime } from "../runtime/index.ts";
import { createNodeApi } from "./api/app.ts";
import { registerNodeMetrics } from "./api/node-metrics.ts";
import type { NodeHealth, NodeInventory } from "../contract/node-api.ts";
import { startHeartbeat } from "./ctl/heartbeat.ts";
import { ensureNodeId } from "./ctl/node-id.ts";
import { hostMemory, memoryMoved } from "./ctl/host-memory.ts";
import { DirectoryDisks } from "./disk/directory-disks.ts";
import { Disks } from "./disk/disks.ts";
import { VolumeDisks } from "./disk/volume-disks.ts";
import { ensureNodeCache, freeMib, unmountNodeCache, type NodeCache } from "./disk/node-cache.ts";
import { NodeResolver, upstreamFromConfig, upstreamFromResolvConf, type Upstream } from "./dns/resolver.ts";
import { EgressProxy, guardrailCheck } from "./network/egress-proxy.ts";
import { LinuxNetworkSlots } from "./network/slots.ts";
import { ENVD_NODE_FLAGS } from "./sandboxes/envd-launch.ts";
import { SandboxHealth } from "./sandboxes/sandbox-health.ts";
import { SandboxManager } from "./sandboxes/manager.ts";
import { HostAttachments, SlotAttachments } from "./sandboxes/network-attachments.ts";
import { defaultStagingDir, NodeSnapshots } from "./snapshots/node-snapshots.ts";
import { SnapshotReaper } from "./snapshots/reaper.ts";
import type { BlobStore } from "../blob/open.ts";
import { parseClusterKey } from "../core/envelope.ts";
import { BASE_TEMPLATE, ensureBaseTemplateTarball, type TemplateTarball } from "./templates/base-template.ts";
import { CODE_INTERPRETER_TEMPLATE, codeInterpreterBoot, findCodeInterpreterTarball } from "./templates/code-interpreter-template.ts";
import { resolveDebianMirror } from "./templates/debian-mirror.ts";
import { cpuFeatures } from "./templates/cpu-features.ts";
import { environmentDigest } from "../contract/execution-environment.ts";
import { RegistrySource } from "./templates/registry-source.ts";
import { loadRootfsTrust } from "./templates/ca-trust.ts";
import { TemplateBuilder } from "./templates/builder.ts";
import { registerTemplateRoutes } from "./templates/template-routes.ts";
import { TemplateCache } from "./templates/template-cache.ts";
import { BootCaptures, nodeIdentity } from "./templates/boot-capture.ts";
import { ForegroundActivity } from "../core/foreground-activity.ts";
import { openBlobStore } from "../blob/open.ts";
import { closeGracefully } from "../core/http-close.ts";

export const REPO_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface NodeAgentDeps {
  /** node-ctl publication to the control plane (registration wiring is the caller's). */
  publish?: (inventory: NodeInventory) => Promise<void>;
  /** Sandbox ids the control plane wants on this node, asked once at start; others are killed. */
  wanted?: () => Promise<Set<string> | undefined>;
  /**
   * Told once at start, after the reconcile, which sandboxes this node kept (adopted or
   * stopped with their disk): the control plane fails the records of the others.
   */
  reconciled?: (kept: ReadonlySet<string>) => Promise<void>;
  /**
   * The watchdog found a running sandbox unhealthy (envd no longer answers): the control
   * plane fails its record; true = the node kills it now. Absent: only logged.
   */
  unhealthy?: (sandboxId: string, reason: string) => Promise<boolean>;
  /** Host dir holding envd.mjs (default <repo>/dist/envd). */
  envdDir?: string;
  /** Node.js binary mounted into sandboxes (default this process's). */
  nodeBinary?: string;
  /** Machine-wide cache of template tarballs (default SPACE_BASE_TEMPLATE_DIR, else <repo>/.tools/templates). */
  templateCacheDir?: string;
  /** runc/crun state dir (default /run/space/runc). */
  runtimeStateDir?: string;
  /** Internal token; default SPACE_INTERNAL_TOKEN, else <data dir>/internal-token (created once). */
  internalToken?: string;
  /**
   * Names of the host objects this agent owns. One agent per host is the design; tests
   * running beside a `space up` on the same host use their own names so neither sweeps the
   * other's (also give them a distinct SPACE_NODE_SLOT_CIDR).
   */
  hostScope?: { bridge?: string; nftTable?: string; vethPrefix?: string; cgroupParent?: string };
  /** Show the base template build progress on stderr (default true). */
  progress?: boolean;
  /** Where the node resolver forwards (default: first nameserver of /etc/resolv.conf). */
  dnsUpstream?: Upstream;
  /** The process registry: the node's families go there and node-api serves it at `/metrics`; absent = no /metrics. */
  metrics?: Registry;
}

export interface NodeAgent {
  app: FastifyInstance;
  start(): Promise<void>;
  stop(opts?: { unmountCache?: boolean }): Promise<void>;
  inventory(): Promise<NodeInventory>;
  /** Available after start(). */
  readonly manager: SandboxManager | undefined;
  readonly runtime: Runtime | undefined;
  readonly slots: LinuxNetworkSlots | undefined;
  readonly disks: Disks | undefined;
  /** Template builds on this node (isolated runtimes only). */
  readonly builder: TemplateBuilder | undefined;
  /** The template cache: pulls, prefetch, eviction, GC (isolated runtimes only). */
  readonly templates: TemplateCache | undefined;
  /** Memory checkpoints (runc + CRIU only). */
  readonly snapshots: NodeSnapshots | undefined;
  readonly nodeId: string | undefined;
  /** The token node-api expects (after start()). */
  readonly token: string;
}

export function createNodeAgent(config: Config, logger: Logger, deps: NodeAgentDeps = {}): NodeAgent {
  const nodeDir = resolve(config.SPACE_NODE_DIR);
  const stagingDir = config.SPACE_NODE_SNAPSHOT_STAGING_DIR || defaultStagingDir(nodeDir);
  const log = logger.child({ component: "node" });
  let token = deps.internalToken ?? config.SPACE_INTERNAL_TOKEN;
  let manager: SandboxManager | undefined;
  let runtime: Runtime | undefined;
  let slots: LinuxNetworkSlots | undefined;
  /** Creates and adoptions: the telemetry, the health watchdog and the slot pool's refill yield to them. */
  const foreground = new ForegroundActivity();
  let disks: Disks | undefined;
  let volumes: VolumeDisks | undefined;
  let builder: TemplateBuilder | undefined;
  let templates: TemplateCache | undefined;
  let snapshots: NodeSnapshots | undefined;
  let reaper: SnapshotReaper | undefined;
  let blob: BlobStore | undefined;
  let cache: NodeCache | undefined;
  let nodeId: string | undefined;
  let environment = "";
  let heartbeat: { stop(): Promise<void> } | undefined;
  let watchdog: SandboxHealth | undefined;
  let resolver: NodeResolver | undefined;
  let egressProxy: EgressProxy | undefined;
  let startError: string | undefined;
  // The code interpreter's tarball, when the machine's set-up built it: imported on first use only.
  let interpreterTar: TemplateTarball | undefined;

  const inventory = async (): Promise<NodeInventory> => {
    const used = manager?.used() ?? { vcpu: 0, memoryMib: 0, diskMib: 0 };
    const space = cache ? await freeMib(cache) : { totalMib: 0, freeMib: 0 };
    const memory = await hostMemory();
    const templates = disks ? await disks.listTemplates() : [];
    // Offered before it is imported: the first create imports it (TemplateCache `provide`).
    if (interpreterTar && !templates.some((t) => t.name === CODE_INTERPRETER_TEMPLATE)) {
      templates.push({ name: CODE_INTERPRETER_TEMPLATE, rootfsSizeMib: interpreterTar.rootfsSizeMib, importedAt: "", source: interpreterTar.tarPath });
    }
    return {
      nodeId: nodeId ?? "",
      name: config.SPACE_NODE_NAME || hostname(),
      runtime: runtime?.kind ?? config.SPACE_RUNTIME,
      capacity: {
        networkSlots: config.SPACE_NODE_MAX_SLOTS,
        vcpu: cpus().length,
        memoryMib: Math.floor(totalmem() / 1048576),
        diskMib: Math.max(0, space.totalMib - config.SPACE_NODE_DISK_RESERVE_MIB),
      },
      used: {
        networkSlots: slots?.inUse() ?? manager?.count() ?? 0,
        vcpu: used.vcpu,
        memoryMib: used.memoryMib,
        diskMib: used.diskMib,
        sandboxes: manager?.count() ?? 0,
        // Measured, for the capacity model (docs/capacity.md).
        settled: manager?.settled() ?? 0,
        ...memory,
        ...(cache ? { diskHeldMib: space.totalMib - space.freeMib } : {}),
      },
      usableEnvironments: environment ? [environment] : [],
      templates: templates.map((t) => ({ templateId: t.name, rootfsSizeMib: t.rootfsSizeMib, environment })),
    };
  };

  const health = async (): Promise<NodeHealth> => {
    if (!manager) return { nodeId: nodeId ?? "", status: "degraded", detail: startError ?? "starting" };
    const pool = slots?.poolHealth();
    if (pool && !pool.healthy) return { nodeId: nodeId ?? "", status: "degraded", detail: `warm slot pool has ${pool.ready} of ${pool.minReady} ready` };
    return { nodeId: nodeId ?? "", status: "ok" };
  };

  // The token may only be known after start() (token file): node-api reads it per request.
  const app = createNodeApi({
    token: () => token,
    manager: () => manager,
    snapshots: () => snapshots,
    restoreCaptured: async (spec, sig) => templates?.restoreCaptured(spec, sig),
    volumes: {
      volumes: () => volumes,
      blob: () => blob,
      clusterKey: () => parseClusterKey(config.SPACE_ENCRYPTION_KEY),
      scratchDir: () => join(nodeDir, "volume-moves"),
    },
    inventory,
    health,
    logger: log,
    ...(deps.metrics ? { metrics: deps.metrics, metricsToken: config.SPACE_METRICS_TOKEN } : {}),
  });
  if (deps.metrics) registerNodeMetrics(deps.metrics, { inventory, manager: () => manager, runtime: () => runtime, warmDisks: () => disks?.warm.ready() ?? new Map() });
  registerTemplateRoutes(app, () => builder, () => templates);

  const agent: NodeAgent = {
    app,
    inventory,
    get manager() {
      return manager;
    },
    get runtime() {
      return runtime;
    },
    get slots() {
      return slots;
    },
    get disks() {
      return disks;
    },
    get builder() {
      return builder;
    },
    get templates() {
      return templates;
    },
    get snapshots() {
      return snapshots;
    },
    get nodeId() {
      return nodeId;
    },
    get token() {
      return token;
    },

    async start() {
      const signal = AbortSignal.timeout(30 * 60_000);
      try {
        await mkdir(nodeDir, { recursive: true });
        nodeId = await ensureNodeId(nodeDir);
        if (!token) token = await ensureTokenFile(join(config.SPACE_DATA_DIR, "internal-token"));
        const criuPath = join(REPO_DIR, ".tools", "criu", "criu");
        // runc's state dir too when it is this node's: the default one, or one in its data dir
        // (one elsewhere is the operator's to place).
        const runtimeStateDir = deps.runtimeStateDir ?? DEFAULT_RUNTIME_STATE_DIR;
        const ownsStateDir = !deps.runtimeStateDir || [config.SPACE_DATA_DIR, nodeDir].some((d) => isInside(runtimeStateDir, d));
        const bootScoped = [join(nodeDir, "bundles"), join(nodeDir, "slots"), ...(ownsStateDir ? [runtimeStateDir] : [])];
        if (config.SPACE_RUNTIME !== "process") await bootScopedDirs(bootScoped, RUNTIME_REGENERATED_FILES, log, signal);
        runtime = createRuntime({
          kind: config.SPACE_RUNTIME,
          stateDir: runtimeStateDir,
          bundlesDir: join(nodeDir, "bundles"),
          criuPath,
          cgroupParent: deps.hostScope?.cgroupParent,
          logger: log,
        });
        const isolated = runtime.kind !== "process";
        if (isolated) {
          if (config.SPACE_NODE_CGROUP_FAVOR_DYNMODS) await favorCgroupMigrations(log, signal);
          cache = await ensureNodeCache({
            nodeDir,
            btrfsPath: config.SPACE_NODE_BTRFS_PATH,
            imageGib: config.SPACE_NODE_BTRFS_IMAGE_GIB,
            logger: log,
            signal,
            squotaHelper: join(REPO_DIR, ".tools", "bin", "btrfs-squota"),
          });
          disks = new Disks(cache, { reserveMib: config.SPACE_NODE_DISK_RESERVE_MIB, logger: log, keepMs: config.SPACE_NODE_SLOT_KEEP_MS, warmDisks: config.SPACE_NODE_WARM_DISKS });
          volumes = new VolumeDisks(cache, { logger: log });
          await mkdir(join(nodeDir, "volume-moves"), { recursive: true });
          const tarballs = deps.templateCacheDir ?? (config.SPACE_BASE_TEMPLATE_DIR || join(REPO_DIR, ".tools", "templates"));
          interpreterTar = await findCodeInterpreterTarball(tarballs);
          if (!(await disks.templateInfo(BASE_TEMPLATE))) {
            const mirror = await resolveDebianMirror(config.SPACE_DEBIAN_MIRROR);
            const tar = await ensureBaseTemplateTarball({
              cacheDir: tarballs,
              mirror,
              logger: log,
              signal,
              progress: deps.progress,
            });
            await disks.ensureTemplateFromTar(BASE_TEMPLATE, tar.tarPath, signal);
          }
          slots = new LinuxNetworkSlots({
            cidr: config.SPACE_NODE_SLOT_CIDR,
            maxSlots: config.SPACE_NODE_MAX_SLOTS,
            stateDir: join(nodeDir, "slots"),
            bridge: deps.hostScope?.bridge,
            nftTable: deps.hostScope?.nftTable,
            vethPrefix: deps.hostScope?.vethPrefix,
            pool: {
              target: config.SPACE_NODE_NETWORK_POOL_TARGET,
              retainReady: config.SPACE_NODE_NETWORK_POOL_RETAIN_READY,
              minReady: config.SPACE_NODE_NETWORK_POOL_MIN_READY,
            },
            guardrails: config.SPACE_NODE_GUARDRAILS,
            guardrailExceptions: config.SPACE_NODE_GUARDRAIL_EXCEPTIONS,
            keepMs: config.SPACE_NODE_SLOT_KEEP_MS,
            foreground,
            logger: log,
          });
        }
        // Read at start (a missing or empty bundle stops the agent naming the variable); in rootfs trust stores only when asked.
        const extraCa = config.SPACE_EXTRA_CA_CERTS ? await loadRootfsTrust(config.SPACE_EXTRA_CA_CERTS) : undefined;
        const trust = config.SPACE_EXTRA_CA_CERTS_IN_SANDBOXES ? extraCa : undefined;
        // The process runtime isolates nothing: plain directories and the host's network.
        const sandboxDisks = disks ?? new DirectoryDisks(join(nodeDir, "process-disks"));
        const envdDir = deps.envdDir ?? join(REPO_DIR, "dist", "envd");
        const nodeBinary = deps.nodeBinary ?? process.execPath;
        environment = environmentDigest({
          runtimeKind: runtime.kind,
          runtimeVersion: await runtime.version(signal),
          rootfsFormat: sandboxDisks.rootfsFormat,
          cpuFeatures: await cpuFeatures(),
        });
        const m = new SandboxManager({
          nodeDir,
          runtime,
          disks: sandboxDisks,
          ...(volumes ? { volumes } : {}),
          network: slots ? new SlotAttachments(slots) : new HostAttachments(),
          discardInitOutput: runtime.kind === "runc",
          bootConcurrency: config.SPACE_NODE_BOOT_CONCURRENCY,
          envdDir,
          nodeBinary,
          ...(trust ? { trust } : {}),
          foreground,
          telemetry: {
            intervalMs: config.SPACE_METRICS_INTERVAL_MS,
            metricsSamples: config.SPACE_METRICS_SAMPLES,
            logEntries: config.SPACE_SANDBOX_LOG_ENTRIES,
            retentionMs: config.SPACE_SANDBOX_LOG_RETENTION_S * 1000,
          },
          logger: log,
        });
        const wanted = deps.wanted ? await deps.wanted().catch(() => undefined) : undefined;
        const { adopted, stopped } = await m.reconcile(signal, wanted);
        // Not fatal: the records then wait for their own timeouts, as before.
        await deps.reconciled?.(new Set([...adopted, ...stopped])).catch((e: unknown) => log.warn({ err: e }, "could not report the reconciled sandboxes"));
        m.telemetry.start();
        if (config.SPACE_NODE_HEALTH_THRESHOLD > 0) {
          const report = deps.unhealthy;
          watchdog = new SandboxHealth({
            intervalMs: config.SPACE_NODE_HEALTH_INTERVAL_MS,
            threshold: config.SPACE_NODE_HEALTH_THRESHOLD,
            running: () => m.running(),
            probe: (o) => m.telemetry.probe(o, config.SPACE_NODE_HEALTH_INTERVAL_MS),
            // Killed only once its record is failed: one killed behind the control plane's back would be a phantom.
            unhealthy: async (id, reason) => {
              if (report && (await report(id, reason))) await m.kill(id, AbortSignal.timeout(120_000));
              return true;
            },
            foreground,
            logger: log,
          });
          watchdog.start();
        }
        if (slots) {
          await slots.init((owner) => m.keepsSlot(owner), signal);
          const upstream =
            deps.dnsUpstream ??
            upstreamFromConfig(config.SPACE_NODE_DNS_UPSTREAM) ??
            upstreamFromResolvConf(await readFile("/etc/resolv.conf", "utf8").catch(() => "")) ??
            { host: "127.0.0.53", port: 53 };
          resolver = new NodeResolver({ listen: slots.range.gateway, upstream, binder: slots, logger: log });
          await resolver.start();
          const s = slots;
          egressProxy = new EgressProxy({
            listen: s.range.gateway,
            policyOf: (address) => s.policyAt(address),
            guarded: guardrailCheck({ slotCidr: s.range.cidr, guardrails: config.SPACE_NODE_GUARDRAILS, exceptions: config.SPACE_NODE_GUARDRAIL_EXCEPTIONS }),
            logger: log,
          });
          await egressProxy.start();
        }
        if (disks) {
          blob = openBlobStore(config);
          snapshots = NodeSnapshots.create({
            nodeDir,
            runtime,
            disks,
            manager: m,
            blob,
            ...clusterKeys(config),
            logger: log,
            staging: { dir: stagingDir, budgetMib: config.SPACE_NODE_SNAPSHOT_STAGING_MIB },
            keepMs: config.SPACE_NODE_SLOT_KEEP_MS,
          });
          if (snapshots) {
            void snapshots.recoverStaged().catch((e: unknown) => log.warn({ err: e }, "recovering staged memory images failed"));
            reaper = new SnapshotReaper(snapshots, disks.cache.mountPath, {
              target: config.SPACE_SNAPSHOT_REAPER_TARGET,
              intervalMs: config.SPACE_SNAPSHOT_REAPER_INTERVAL_S * 1000,
              graceMs: config.SPACE_SNAPSHOT_REAPER_GRACE_S * 1000,
              idleMs: config.SPACE_SNAPSHOT_REAPER_IDLE_S * 1000,
              logger: log,
            });
            reaper.start();
          }
        }
        manager = m;
        if (cache && disks) {
          const tc = new TemplateCache({
            disks,
            blob,
            ...clusterKeys(config),
            inUse: () => new Set(m.list().map((s) => s.template)),
            targetMib: config.SPACE_TEMPLATE_CACHE_TARGET_MIB,
            gcIntervalMs: config.SPACE_TEMPLATE_GC_INTERVAL_S * 1000,
            graceMs: config.SPACE_TEMPLATE_GC_GRACE_S * 1000,
            prefetch: config.SPACE_TEMPLATE_PREFETCH,
            scratchDir: join(nodeDir, "template-pulls"),
            ...(snapshots ? { capture: { manager: m, snapshots, disks, logger: log } } : {}),
            ...(snapshots && config.SPACE_NODE_BOOT_CAPTURE
              ? {
                  bootCaptures: new BootCaptures({
                    deps: { manager: m, snapshots, disks, logger: log },
                    dir: join(nodeDir, "boot-captures"),
                    identity: await nodeIdentity(
                      [join(envdDir, "envd.mjs"), join(envdDir, "envd.blob"), nodeBinary, criuPath, ...(trust ? [config.SPACE_EXTRA_CA_CERTS] : [])],
                      [environment, String(config.SPACE_SANDBOX_LOG_ENTRIES), ...ENVD_NODE_FLAGS],
                    ),
                  }),
                }
              : {}),
            provide: async (name, sig) => {
              const d = disks;
              if (name !== CODE_INTERPRETER_TEMPLATE || !interpreterTar || !d) return undefined;
              return d.ensureTemplateFromTar(name, interpreterTar.tarPath, sig, codeInterpreterBoot());
            },
            logger: log,
          });
          await tc.recover(signal);
          tc.start();
          templates = tc;
          builder = new TemplateBuilder({
            cache,
            disks,
            runtime,
            slots,
            blobs: openBlobStore(config),
            nodeBinary,
            scratchDir: join(nodeDir, "builds"),
            environment: () => environment,
            capture: (name, sig) => tc.capture(name, sig),
            publish: (name, sig) => tc.publish(name, sig),
            ...(trust ? { trust } : {}),
            registry: new RegistrySource({
              dir: join(nodeDir, "registry"),
              insecure: config.SPACE_REGISTRY_INSECURE,
              mirrors: config.SPACE_REGISTRY_MIRRORS,
              ...(config.SPACE_REGISTRY_AUTH_FILE ? { authFile: config.SPACE_REGISTRY_AUTH_FILE } : {}),
              ...(config.SPACE_EXTRA_CA_CERTS ? { caBundle: config.SPACE_EXTRA_CA_CERTS } : {}),
              inspectTimeoutMs: config.SPACE_REGISTRY_INSPECT_TIMEOUT_S * 1000,
              env: process.env,
            }),
            logger: log,
          });
        }
        if (deps.publish) {
          const everyMs = config.SPACE_NODE_MEMORY_CHECK_MS;
          const early = { everyMs, due: async (p: NodeInventory) => memoryMoved(p.used, await hostMemory(), config.SPACE_CAPACITY_MEMORY_REQUEST_MIB) };
          heartbeat = startHeartbeat({ intervalMs: config.SPACE_NODE_HEARTBEAT_MS, inventory, publish: deps.publish, logger: log, ...(everyMs ? { early } : {}) });
        }
        log.info({ nodeId, runtime: runtime.kind, environment, nodeDir }, "node agent started");
      } catch (e) {
        startError = e instanceof Error ? e.message : String(e);
        throw e;
      }
    },

    async stop(opts = {}) {
      await watchdog?.stop();
      watchdog = undefined;
      await manager?.telemetry.stop();
      await heartbeat?.stop();
      await reaper?.stop();
      reaper = undefined;
      heartbeat = undefined;
      await resolver?.stop();
      resolver = undefined;
      await egressProxy?.stop();
      egressProxy = undefined;
      await builder?.close();
      await templates?.close();
      await closeGracefully(() => app.close(), app.server);
      await snapshots?.stop();
      const release = config.SPACE_NODE_RELEASE_ON_STOP;
      const signal = AbortSignal.timeout(120_000);
      if (release && manager) {
        for (const s of manager.list()) {
          await manager.kill(s.sandboxId, signal).catch((e: unknown) => log.warn({ sandboxId: s.sandboxId, err: e }, "kill on release failed"));
        }
      }
      if (release) await slots?.destroy(signal);
      else await slots?.drainPool(signal);
      await disks?.close();
      await blob?.close();
      if (opts.unmountCache || release) {
        if (cache) await unmountNodeCache(cache);
        // The node's cgroup parent in every hierarchy, once no sandbox is left under it (rmdir refuses otherwise).
        for (const dir of Object.values(runtime?.cgroupDirs("x") ?? {})) await rmdir(dirname(dir)).catch(() => undefined);
      }
      manager = undefined;
    },
  };
  return agent;
}

const DEFAULT_RUNTIME_STATE_DIR = "/run/space/runc";

function isInside(path: string, dir: string): boolean {
  const r = relative(resolve(dir), resolve(path));
  return r !== "" && !r.startsWith("..") && !isAbsolute(r);
}

/**
 * The node's dirs whose files live as long as the host's boot, each on a tmpfs of its own
 * unless it is on one already (core/tmpfs.ts). One that cannot be (it holds files from
 * before, or the mount failed) stays where it is, said once.
 */
async function bootScopedDirs(dirs: string[], regenerated: readonly string[], log: Logger, signal: AbortSignal): Promise<void> {
  await Promise.all(
    dirs.map(async (dir) => {
      const why = await ensureTmpfs(dir, { name: "space-run", sizeMib: 256, regenerated, signal }).then(
        (onTmpfs) => (onTmpfs ? undefined : "it holds files from before"),
        (e: unknown) => `the mount failed: ${e instanceof Error ? e.message : String(e)}`,
      );
      if (why) log.warn({ dir, why }, "a boot-scoped dir stays on its disk (its files cost inodes on every create)");
    }),
  );
}

async function ensureTokenFile(path: string): Promise<string> {
  const have = await readFile(path, "utf8").then((s) => s.trim(), () => "");
  if (have) return have;
  const t = `sit_${randomBytes(24).toString("base64url")}`;
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, `${t}\n`, { mode: 0o600 });
  return t;
}

/** The cluster key and, during a rotation, the one before it (unwrap only). */
function clusterKeys(config: Config): { clusterKey?: Buffer; previousKey?: Buffer } {
  const clusterKey = parseClusterKey(config.SPACE_ENCRYPTION_KEY);
  const previousKey = parseClusterKey(config.SPACE_ENCRYPTION_KEY_PREVIOUS);
  return { ...(clusterKey ? { clusterKey } : {}), ...(previousKey ? { previousKey } : {}) };
}
