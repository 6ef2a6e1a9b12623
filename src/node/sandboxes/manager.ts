/**
 * sandbox-manager: the node-side lifecycle of sandboxes. Prepare (disk + slot + bundle)
 * with a LIFO cleanup stack so a failure never leaves half-created state, start, pause /
 * resume (freezer), stop (processes end, disk kept) / start again, kill (everything
 * released), and the startup reconcile that adopts survivors and reclaims orphans.
 * Every host object is named after the sandbox id.
 */
import { EventEmitter } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { mkdir, readdir, readFile, rm, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { SpaceError } from "../../core/errors.ts";
import { inBackground, isBackground, restorePriority } from "../../core/priority.ts";
import type { Logger } from "../../core/log.ts";
import type { Runtime, RunSpec } from "../../runtime/runtime.ts";
import { ENVD_PORT, type SandboxMetrics, type SandboxSpec, type SandboxStatus } from "../../contract/node-api.ts";
import type { Disks } from "../disk/disks.ts";
import { CLOSED_POLICY, OPEN_POLICY, type EgressPolicy, type NetworkRecord } from "../../contract/egress-policy.ts";
import type { NetworkSlots } from "../network/slots.ts";
import { resolveInRoot } from "../templates/rootfs-fs.ts";
import { CleanupStack } from "./cleanup-stack.ts";
import { httpStatusOf, waitEnvdHealthy } from "./envd-client.ts";
import { ENVD_MOUNT, envdLaunch, NODE_MOUNT, type EnvdLaunch } from "./envd-launch.ts";
import { startTemplateCommand, templateBoot, waitTemplateReady, type TemplateBoot } from "./template-boot.ts";
import { canTransition, type NodeState } from "./states.ts";

export interface SandboxManagerOptions {
  nodeDir: string;
  runtime: Runtime;
  /** Absent for the `process` runtime (no btrfs, no network isolation). */
  disks?: Disks;
  slots?: NetworkSlots;
  /** Host dir with envd.mjs (and envd.blob, its startup snapshot), mounted read-only at /opt/space/envd. */
  envdDir: string;
  /** Host Node.js binary, mounted read-only at /opt/space/bin/node. */
  nodeBinary: string;
  /** Host resolv.conf copied into each sandbox. */
  resolvConf?: string;
  pidsLimit?: number;
  envdReadyTimeoutMs?: number;
  /** Bound on a template's ready command after its start command (default 30 s; past it the sandbox runs anyway). */
  templateReadyTimeoutMs?: number;
  stopGraceMs?: number;
  logger: Logger;
}

interface Record_ {
  spec: SandboxSpec;
  state: NodeState;
  address: string;
  envdPort: number;
  startedAt: string;
  timings?: Record<string, number>;
}

interface Live extends Record_ {
  /** Serializes lifecycle calls on one sandbox. */
  lock: Promise<unknown>;
  cpuSample?: { at: number; usageNs: number };
}

/** How a sandbox is restored instead of created (node/snapshots). */
export interface RestoreVia {
  /** Sets up the sandbox's disk; returns its root path. */
  disk(signal: AbortSignal): Promise<string>;
  /** Starts the prepared bundle from the memory checkpoint. */
  start(id: string, signal: AbortSignal): Promise<void>;
}

export class SandboxManager {
  private readonly o: SandboxManagerOptions;
  private readonly sandboxes = new Map<string, Live>();
  /** Emits `dead:<id>` when a sandbox is stopped or killed: proxies cut their streams. */
  readonly events = new EventEmitter();
  private readonly recordsDir: string;
  private readonly logsDir: string;
  private readonly processDisksDir: string;
  private launch: Promise<EnvdLaunch> | undefined;

  constructor(o: SandboxManagerOptions) {
    this.o = o;
    this.recordsDir = join(o.nodeDir, "sandboxes");
    this.logsDir = join(o.nodeDir, "logs");
    this.processDisksDir = join(o.nodeDir, "process-disks");
    this.events.setMaxListeners(0);
  }

  get isolated(): boolean {
    return this.o.runtime.kind !== "process";
  }

  list(): SandboxStatus[] {
    return [...this.sandboxes.values()].filter((s) => s.state !== "creating" && s.state !== "killing").map((s) => this.toStatus(s));
  }
  count(): number {
    return this.sandboxes.size;
  }
  /** Sum of requested resources of resident sandboxes (stopped ones hold only disk). */
  used(): { vcpu: number; memoryMib: number; diskMib: number } {
    let vcpu = 0;
    let memoryMib = 0;
    let diskMib = 0;
    for (const s of this.sandboxes.values()) {
      diskMib += s.spec.diskMib;
      if (s.state !== "stopped") {
        vcpu += s.spec.vcpu;
        memoryMib += s.spec.memoryMib;
      }
    }
    return { vcpu, memoryMib, diskMib };
  }

  get(id: string): SandboxStatus {
    return this.toStatus(this.mustGet(id));
  }

  /** Where the proxy sends traffic for `port` of sandbox `id`. */
  target(id: string, port: number): { host: string; port: number } {
    const s = this.mustGet(id);
    if (s.state !== "running") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
    return { host: s.address, port: port === ENVD_PORT ? s.envdPort : port };
  }

  private mustGet(id: string): Live {
    const s = this.sandboxes.get(id);
    if (!s || s.state === "killing") throw new SpaceError("not_found", `sandbox ${id} is not on this node`);
    return s;
  }

  private toStatus(s: Live): SandboxStatus {
    const state = s.state === "paused" ? "paused" : s.state === "running" ? "running" : "stopped";
    return {
      sandboxId: s.spec.sandboxId,
      executionId: s.spec.executionId,
      template: s.spec.template,
      state,
      address: s.address,
      vcpu: s.spec.vcpu,
      memoryMib: s.spec.memoryMib,
      diskMib: s.spec.diskMib,
      startedAt: s.startedAt,
      ...(s.timings ? { timings: s.timings } : {}),
    };
  }

  private async withLock<T>(s: Live, fn: () => Promise<T>): Promise<T> {
    const prev = s.lock;
    let release!: () => void;
    s.lock = new Promise<void>((r) => (release = r));
    try {
      await prev.catch(() => undefined);
      return await fn();
    } finally {
      release();
    }
  }

  private transition(s: Live, to: NodeState): void {
    if (!canTransition(s.state, to)) {
      throw new SpaceError("failed_precondition", `sandbox ${s.spec.sandboxId} is ${s.state}; cannot go to ${to}`);
    }
    s.state = to;
  }

  // ---------------------------------------------------------------- create

  /**
   * `via` (snapshots): the disk comes from a snapshot and the processes from a memory
   * checkpoint instead of the template and a cold boot (node/snapshots).
   */
  async create(spec: SandboxSpec, signal: AbortSignal, via?: RestoreVia): Promise<SandboxStatus> {
    if (spec.background && !isBackground()) return inBackground(() => this.create(spec, signal, via));
    const t0 = performance.now();
    const id = spec.sandboxId;
    const existing = this.sandboxes.get(id);
    if (existing) {
      if (existing.spec.executionId === spec.executionId && existing.state !== "killing") {
        await existing.lock.catch(() => undefined);
        return this.get(id);
      }
      throw new SpaceError("already_exists", `sandbox ${id} already exists on this node`);
    }
    // Refuse at once, before any work: a disk below the template's rootfs, a full node.
    if (via) {
      /* admitted by the snapshot layer (its parent may not be a template of this node) */
    } else if (this.o.disks) await this.o.disks.admit(spec.template, spec.diskMib);
    else if (spec.template !== "base") throw new SpaceError("not_found", `template ${spec.template} is not available to the process runtime`);

    const s: Live = { spec, state: "creating", address: "", envdPort: ENVD_PORT, startedAt: new Date().toISOString(), lock: Promise.resolve() };
    this.sandboxes.set(id, s);
    const stack = new CleanupStack();
    stack.defer("forget", () => {
      this.sandboxes.delete(id);
    });
    try {
      await this.withLock(s, async () => {
        await this.saveRecord(s);
        stack.defer("record", () => rm(this.recordPath(id), { force: true }));
        const timings: Record<string, number> = {};
        // Disk and slot are independent: set them up in parallel. The container starts as
        // soon as the slot's netns exists; the rest of the slot is set up meanwhile.
        const tDisk = performance.now();
        const diskP = (via ? via.disk(signal).then((root) => ({ root, limited: Promise.resolve() })) : this.ensureDisk(spec, signal)).then((d) => {
          timings.diskMs = ms(tDisk);
          return d;
        });
        const slotP = this.claimSlot(s, signal).then(({ configured }) => ({
          configured: configured.then(() => {
            timings.slotMs = ms(tDisk);
          }),
        }));
        const [disk, slot] = await Promise.allSettled([diskP, slotP]);
        if (disk.status === "fulfilled") stack.defer("disk", () => this.releaseDisk(id));
        if (slot.status === "fulfilled") {
          // Never release a slot while it is still being set up.
          stack.defer("slot", () => slot.value.configured.catch(() => undefined).then(() => this.releaseSlot(id)));
        }
        if (disk.status === "rejected") throw disk.reason;
        if (slot.status === "rejected") throw slot.reason;
        stack.defer("runtime", () => this.o.runtime.delete(id, AbortSignal.timeout(60_000)));
        await this.boot(s, disk.value.root, timings, signal, slot.value.configured, via);
        await disk.value.limited; // the qgroup limit, overlapped with the boot
        timings.totalMs = ms(t0);
        s.timings = timings;
        this.transition(s, "running");
        await this.saveRecord(s);
      });
      stack.move(); // success: the sandbox owns its disk, slot and container now
      this.o.logger.info({ sandboxId: id, timings: s.timings }, "sandbox running");
      return this.toStatus(s);
    } catch (e) {
      s.state = "killing";
      this.events.emit(`dead:${id}`);
      await stack.run().catch((ce: unknown) => this.o.logger.error({ sandboxId: id, err: ce }, "cleanup after a failed create"));
      const err = SpaceError.from(e);
      this.o.logger.warn({ sandboxId: id, code: err.code, err: err.message }, "sandbox create failed");
      throw err;
    }
  }

  private async ensureDisk(spec: SandboxSpec, signal: AbortSignal): Promise<{ root: string; limited: Promise<void> }> {
    if (this.o.disks) return this.o.disks.snapshotSandboxDisk(spec.sandboxId, spec.template, spec.diskMib, signal);
    const dir = join(this.processDisksDir, spec.sandboxId);
    await mkdir(dir, { recursive: true });
    return { root: dir, limited: Promise.resolve() };
  }
  private async releaseDisk(id: string): Promise<void> {
    if (this.o.disks) await this.o.disks.releaseSandboxDisk(id, AbortSignal.timeout(60_000));
    else await rm(join(this.processDisksDir, id), { recursive: true, force: true });
  }
  /** Resolves once the slot's netns exists; `configured` once the slot is fully set up. */
  private async claimSlot(s: Live, signal: AbortSignal): Promise<{ configured: Promise<void> }> {
    if (this.o.slots) {
      const { slot, configured } = await this.o.slots.open(s.spec.sandboxId, egressOf(s.spec), signal);
      s.address = slot.address;
      s.envdPort = ENVD_PORT;
      return { configured };
    }
    s.address = "127.0.0.1";
    s.envdPort = await freePort();
    return { configured: Promise.resolve() };
  }
  private async releaseSlot(id: string): Promise<void> {
    if (this.o.slots) await this.o.slots.release(id, AbortSignal.timeout(60_000));
  }

  /** Bundle, runtime start, envd health, envd init. `slotConfigured`: the network slot is fully set up. */
  private async boot(s: Live, rootfs: string, timings: Record<string, number>, signal: AbortSignal, slotConfigured: Promise<void>, via?: RestoreVia): Promise<void> {
    const id = s.spec.sandboxId;
    const t = performance.now();
    if (this.isolated) await this.writeSandboxFiles(s, rootfs);
    await mkdir(this.logsDir, { recursive: true });
    // A restore brings envd's state and the processes back from memory: nothing to apply.
    const tb: TemplateBoot = via || !this.o.disks ? { env: {} } : templateBoot(await this.o.disks.templateInfo(s.spec.template));
    const templateEnv = Object.fromEntries(Object.entries(tb.env).filter(([k]) => !k.startsWith("SPACE_ENVD_")));
    const env: Record<string, string> = {
      PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      HOME: "/root",
      // The template's ENV: defaults under the sandbox's own env vars.
      ...templateEnv,
      E2B_SANDBOX: "true",
      E2B_SANDBOX_ID: id,
      ...s.spec.envVars,
      // envd's knobs (not passed on to processes): the template's WORKDIR and USER.
      ...(tb.workdir ? { SPACE_ENVD_DEFAULT_WORKDIR: tb.workdir } : {}),
      ...(tb.user ? { SPACE_ENVD_DEFAULT_USER: tb.user } : {}),
    };
    this.launch ??= envdLaunch(this.o.envdDir, this.o.nodeBinary, this.o.logger);
    const args = (await this.launch).argv(s.envdPort);
    const run: RunSpec = {
      id,
      rootfs,
      hostname: id,
      args,
      env,
      cwd: "/",
      mounts: [
        { source: this.o.nodeBinary, destination: NODE_MOUNT, readonly: true },
        { source: this.o.envdDir, destination: ENVD_MOUNT, readonly: true },
      ],
      ...(this.o.slots ? { netnsPath: this.o.slots.get(id)!.netnsPath } : {}),
      resources: { vcpu: s.spec.vcpu, memoryMib: s.spec.memoryMib, pidsLimit: this.o.pidsLimit ?? 1024, ...(s.spec.background ? { cpuShares: BACKGROUND_CPU_SHARES } : {}) },
      // runc: stdio on /dev/null, because CRIU cannot dump a host file the container's mount
      // namespace does not see (memory checkpoints, node/snapshots).
      logPath: this.o.runtime.kind === "runc" ? "/dev/null" : join(this.logsDir, `${id}.log`),
    };
    await this.o.runtime.prepare(run, signal);
    if (via) {
      // A memory checkpoint comes back with its sockets: its addresses must be in place.
      // (Measured: restoring while the slot or the disk quota is still being set up won under
      // heavy load but lost 40-100 ms on a quieter 2-core node, CPU and btrfs contention.)
      await slotConfigured;
      await via.start(id, signal);
    } else await this.o.runtime.start(id, signal);
    timings.runtimeMs = ms(t);
    // The slot's setup overlapped the disk and the runtime start; what is left of it is on the path.
    const tSlot = performance.now();
    await slotConfigured;
    timings.slotWaitMs = ms(tSlot);
    const tEnvd = performance.now();
    await waitEnvdHealthy(s.address, s.envdPort, {
      deadlineMs: this.o.envdReadyTimeoutMs ?? 15_000,
      signal,
      alive: async () => {
        const st = await this.o.runtime.state(id, signal);
        return st?.status === "running";
      },
    }).catch(async (e: unknown) => {
      const tail = await readFile(run.logPath, "utf8").then((x) => x.slice(-1500)).catch(() => "");
      throw new SpaceError("unavailable", `${e instanceof Error ? e.message : String(e)}${tail ? `; init log: ${tail.trim()}` : ""}`);
    });
    timings.envdMs = ms(tEnvd);
    if (via || s.spec.accessToken !== undefined || Object.keys(s.spec.envVars).length) {
      await this.initEnvd(s, { envVars: s.spec.envVars, accessToken: s.spec.accessToken });
    }
    if (tb.startCmd) {
      const tStart = performance.now();
      await startTemplateCommand(s.address, s.envdPort, s.spec.accessToken, tb.startCmd, signal).catch((e: unknown) => {
        throw new SpaceError("failed_precondition", `the template's start command could not be started: ${e instanceof Error ? e.message : String(e)}`);
      });
      if (tb.readyCmd) {
        await waitTemplateReady(s.address, s.envdPort, s.spec.accessToken, tb.readyCmd, {
          deadlineMs: this.o.templateReadyTimeoutMs ?? 30_000,
          signal,
          logger: this.o.logger,
          sandboxId: id,
        });
      }
      timings.startCmdMs = ms(tStart);
    }
  }

  /**
   * POST /init to envd (env vars, access token), as E2B's orchestrator does. The default
   * user and workdir are envd's own (from its boot knobs: `user`, or the template's), and
   * a restored envd keeps its state, so /init leaves them alone.
   */
  private async initEnvd(s: Live, body: { envVars?: Record<string, string>; accessToken?: string }): Promise<void> {
    const status = await httpStatusOf(s.address, s.envdPort, "/init", {
      method: "POST",
      timeoutMs: 5000,
      body: JSON.stringify({ ...body, timestamp: new Date().toISOString() }),
      headers: { "content-type": "application/json", ...(s.spec.accessToken ? { "x-access-token": s.spec.accessToken } : {}) },
    });
    if (status >= 300 && status !== 404) throw new SpaceError("unavailable", `envd /init of ${s.spec.sandboxId} answered ${status}`);
  }

  /** /etc/hosts and resolv.conf of the sandbox's own disk. */
  /**
   * hosts, hostname and resolv.conf, in parallel. Each is replaced, never written through:
   * a template's /etc (or a file in it) may be a symlink, and it resolves within the rootfs.
   */
  private async writeSandboxFiles(s: Live, rootfs: string): Promise<void> {
    const id = s.spec.sandboxId;
    // A loopback resolver of the node is unreachable (and refused) from a sandbox. With a
    // network slot, the node resolver on the slot gateway is the only DNS a sandbox reaches.
    const gateway = this.o.slots?.get(id)?.gateway;
    const resolv = gateway
      ? `nameserver ${gateway}\n`
      : (await readFile(this.o.resolvConf ?? "/etc/resolv.conf", "utf8").catch(() => ""))
          .split("\n")
          .filter((l) => !/^nameserver\s+(127\.|::1)/.test(l))
          .join("\n");
    const etc = await resolveInRoot(rootfs, "/etc");
    const files: Array<[string, string]> = [
      ["hosts", `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n${s.address}\t${id}\n`],
      ["hostname", `${id}\n`],
      ["resolv.conf", resolv],
    ];
    await Promise.all(
      files.map(async ([name, text]) => {
        const p = join(etc, name);
        await rm(p, { force: true });
        await writeFile(p, text, { flag: "wx" });
      }),
    );
  }

  // ---------------------------------------------------------------- lifecycle

  async pause(id: string, signal: AbortSignal): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state === "paused") return this.toStatus(s);
      this.transition(s, "paused");
      try {
        await this.o.runtime.pause(id, signal);
      } catch (e) {
        s.state = "running";
        throw e;
      }
      await this.saveRecord(s);
      return this.toStatus(s);
    });
  }

  async resume(id: string, signal: AbortSignal): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state === "running") return this.toStatus(s);
      if (s.state !== "paused") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not paused`);
      await this.o.runtime.resume(id, signal);
      s.state = "running";
      await this.saveRecord(s);
      return this.toStatus(s);
    });
  }

  /**
   * Suspend (node/snapshots): `capture` checkpoints the memory (the processes end) and
   * snapshots the disk; then everything the sandbox holds here is released. When capture
   * fails the sandbox is left running (CRIU resumes the processes on a failed dump).
   */
  async suspend(id: string, capture: () => Promise<void>, signal: AbortSignal): Promise<void> {
    const s = this.mustGet(id);
    await this.withLock(s, async () => {
      if (s.state === "paused") {
        await this.o.runtime.resume(id, signal);
        s.state = "running";
      }
      if (s.state !== "running") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
      await capture();
      s.state = "killing";
      this.events.emit(`dead:${id}`);
      await this.reclaim(id, signal);
      this.sandboxes.delete(id);
    });
  }

  /** Runs `fn` (a live checkpoint: fork, named snapshot) while no other lifecycle call runs on `id`. */
  async withRunning<T>(id: string, fn: (st: SandboxStatus) => Promise<T>): Promise<T> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state !== "running" && s.state !== "paused") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
      return fn(this.toStatus(s));
    });
  }

  /** Processes end; the disk is kept; the network slot is released. */
  async stop(id: string, signal: AbortSignal): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state === "stopped") return this.toStatus(s);
      this.transition(s, "stopped");
      this.events.emit(`dead:${id}`);
      await this.o.runtime.stop(id, this.o.stopGraceMs ?? 2000, signal);
      await this.releaseSlot(id);
      s.address = "";
      s.timings = undefined;
      await this.saveRecord(s);
      return this.toStatus(s);
    });
  }

  /** Boots a stopped sandbox again from its kept disk. */
  async start(id: string, signal: AbortSignal): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state === "running" || s.state === "paused") return this.toStatus(s);
      this.transition(s, "starting");
      const stack = new CleanupStack();
      try {
        const t0 = performance.now();
        const timings: Record<string, number> = {};
        const rootfs = this.o.disks ? this.o.disks.sandboxRoot(id) : join(this.processDisksDir, id);
        const { configured } = await this.claimSlot(s, signal);
        stack.defer("slot", () => configured.catch(() => undefined).then(() => this.releaseSlot(id)));
        await configured;
        timings.slotMs = ms(t0);
        stack.defer("runtime", () => this.o.runtime.stop(id, 0, AbortSignal.timeout(60_000)));
        await this.boot(s, rootfs, timings, signal, configured);
        timings.totalMs = ms(t0);
        s.timings = timings;
        s.startedAt = new Date().toISOString();
        s.state = "running";
        await this.saveRecord(s);
        stack.move();
        return this.toStatus(s);
      } catch (e) {
        await stack.run().catch(() => undefined);
        s.state = "stopped";
        s.address = "";
        throw SpaceError.from(e);
      }
    });
  }

  async init(id: string, body: { envVars?: Record<string, string>; accessToken?: string }): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    if (s.state !== "running") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
    if (body.envVars) s.spec.envVars = { ...s.spec.envVars, ...body.envVars };
    if (body.accessToken !== undefined) s.spec.accessToken = body.accessToken;
    // Full CPU weight first: envd answers /init at the weight it then has.
    if (s.spec.background) this.toForeground(s);
    await Promise.all([body.envVars || body.accessToken !== undefined ? this.initEnvd(s, body) : undefined, this.saveRecord(s)]);
    return this.toStatus(s);
  }

  /**
   * A background sandbox (warm member) gets the default CPU weight and normal niceness back.
   * Synchronous: two tiny cgroup files, where a trip through the fs thread pool cost more.
   */
  private toForeground(s: Live): void {
    const dir = this.o.runtime.cgroupDirs(s.spec.sandboxId).cpu;
    delete s.spec.background;
    if (!dir) return;
    writeFileSync(join(dir, "cpu.shares"), String(DEFAULT_CPU_SHARES));
    // niceness is per thread on Linux: every task, not just each process.
    let tasks = "";
    try {
      tasks = readFileSync(join(dir, "tasks"), "utf8");
    } catch {
      /* no tasks file: nothing to renice */
    }
    restorePriority(tasks.split("\n").filter(Boolean).map(Number));
  }

  async setEgress(id: string, allowInternetAccess: boolean, signal: AbortSignal, policy?: EgressPolicy): Promise<void> {
    const s = this.mustGet(id);
    s.spec.allowInternetAccess = allowInternetAccess;
    s.spec.network = policy;
    if (this.o.slots && this.o.slots.get(id)) await this.o.slots.setPolicy(id, egressOf(s.spec), signal);
    await this.saveRecord(s);
  }

  /** What the sandbox's slot recorded: destinations observed (observe mode) and refused. */
  async networkRecord(id: string, signal: AbortSignal): Promise<NetworkRecord> {
    this.mustGet(id);
    if (!this.o.slots?.observed || !this.o.slots.get(id)) return { observed: [], denied: [] };
    return this.o.slots.observed(id, signal);
  }

  /** Ends the sandbox and releases everything it holds. Absent = ok. */
  async kill(id: string, signal: AbortSignal): Promise<void> {
    const s = this.sandboxes.get(id);
    if (!s) {
      await this.reclaim(id, signal);
      return;
    }
    await this.withLock(s, async () => {
      if (s.state === "killing" && !this.sandboxes.has(id)) return;
      s.state = "killing";
      this.events.emit(`dead:${id}`);
      await this.reclaim(id, signal);
      this.sandboxes.delete(id);
    });
  }

  /** Releases every host object named after `id` (used by kill and the orphan sweep). */
  private async reclaim(id: string, signal: AbortSignal): Promise<void> {
    const stack = new CleanupStack();
    // Registered in acquire order; run LIFO: record, disk, slot, runtime (container first).
    stack.defer("record", () => rm(this.recordPath(id), { force: true }));
    stack.defer("log", () => rm(join(this.logsDir, `${id}.log`), { force: true }));
    stack.defer("disk", () => this.releaseDisk(id));
    stack.defer("slot", () => this.releaseSlot(id));
    stack.defer("runtime", () => this.o.runtime.delete(id, signal));
    await stack.run();
  }

  // ---------------------------------------------------------------- metrics

  async metrics(id: string, signal: AbortSignal): Promise<SandboxMetrics> {
    const s = this.mustGet(id);
    const dirs = this.o.runtime.cgroupDirs(id);
    const readNum = (p: string | undefined) => (p ? readFile(p, "utf8").then((x) => Number(x.trim()), () => 0) : Promise.resolve(0));
    let cpuUsedPct = 0;
    const usage = await readNum(dirs.cpuacct && join(dirs.cpuacct, "cpuacct.usage"));
    const now = performance.now();
    let prev = s.cpuSample;
    if (!prev && usage) {
      // No earlier sample: measure over a short window.
      prev = { at: now, usageNs: usage };
      await new Promise((r) => setTimeout(r, 100));
    }
    const usage2 = prev && prev.at === now ? await readNum(dirs.cpuacct && join(dirs.cpuacct, "cpuacct.usage")) : usage;
    const now2 = performance.now();
    if (prev && now2 > prev.at) cpuUsedPct = Math.min(100, ((usage2 - prev.usageNs) / 1e6 / (now2 - prev.at) / s.spec.vcpu) * 100);
    s.cpuSample = { at: now2, usageNs: usage2 };
    const memUsed = await readNum(dirs.memory && join(dirs.memory, "memory.usage_in_bytes"));
    const stat = dirs.memory ? await readFile(join(dirs.memory, "memory.stat"), "utf8").catch(() => "") : "";
    const memCache = Number(/^total_cache (\d+)/m.exec(stat)?.[1] ?? /^cache (\d+)/m.exec(stat)?.[1] ?? 0);
    const disk = this.o.disks ? await this.o.disks.usage(id, signal) : undefined;
    return {
      timestamp: new Date().toISOString(),
      cpuCount: s.spec.vcpu,
      cpuUsedPct: Math.max(0, Math.round(cpuUsedPct * 100) / 100),
      memUsed: Math.max(0, memUsed - memCache),
      memTotal: s.spec.memoryMib * 1024 * 1024,
      memCache,
      diskUsed: disk?.referencedBytes ?? 0,
      diskTotal: s.spec.diskMib * 1024 * 1024,
    };
  }

  // ---------------------------------------------------------------- records and reconcile

  private recordPath(id: string): string {
    return join(this.recordsDir, `${id}.json`);
  }
  private async saveRecord(s: Live): Promise<void> {
    await mkdir(this.recordsDir, { recursive: true });
    const r: Record_ = { spec: s.spec, state: s.state, address: s.address, envdPort: s.envdPort, startedAt: s.startedAt, ...(s.timings ? { timings: s.timings } : {}) };
    // Holds env vars and the envd token: root-only.
    await writeFile(this.recordPath(s.spec.sandboxId), JSON.stringify(r), { mode: 0o600 });
  }

  async readRecords(): Promise<Record_[]> {
    const out: Record_[] = [];
    for (const f of await readdir(this.recordsDir).catch(() => [] as string[])) {
      if (!f.endsWith(".json")) continue;
      const r = await readFile(join(this.recordsDir, f), "utf8").then((t) => JSON.parse(t) as Record_).catch(() => undefined);
      if (r) out.push(r);
    }
    return out;
  }

  /**
   * After a node (agent) restart: adopt sandboxes the runtime still runs, mark those whose
   * processes died as stopped (disk kept), forget records whose disk is gone (the cache is
   * reformatted on reboot), and reclaim every orphan named like a sandbox id. `wanted`, when
   * given, is what the control plane still wants here; anything else is killed.
   * Must run before the network slots are initialised with `keeps()`.
   */
  async reconcile(signal: AbortSignal, wanted?: Set<string>): Promise<{ adopted: string[]; stopped: string[]; reclaimed: string[] }> {
    const adopted: string[] = [];
    const stopped: string[] = [];
    const reclaimed: string[] = [];
    const records = await this.readRecords();
    const containers = new Map((await this.o.runtime.list(signal)).map((c) => [c.id, c]));
    const disks = new Set(this.o.disks ? await this.o.disks.listSandboxDisks() : []);
    for (const r of records) {
      const id = r.spec.sandboxId;
      const c = containers.get(id);
      const hasDisk = this.o.disks ? disks.has(id) : true;
      if (!hasDisk || r.state === "creating" || r.state === "killing" || (wanted && !wanted.has(id))) {
        await this.reclaim(id, signal).catch((e: unknown) => this.o.logger.error({ sandboxId: id, err: e }, "reclaim failed"));
        reclaimed.push(id);
        continue;
      }
      const live: Live = { ...r, lock: Promise.resolve() };
      if (c && (c.status === "running" || c.status === "paused") && (r.state === "running" || r.state === "paused" || r.state === "starting")) {
        live.state = c.status;
        adopted.push(id);
      } else {
        if (c) await this.o.runtime.stop(id, 0, signal).catch(() => undefined);
        live.state = "stopped";
        live.address = "";
        stopped.push(id);
      }
      this.sandboxes.set(id, live);
      await this.saveRecord(live);
    }
    // Orphans: containers, disks, cgroups and logs named after sandbox ids nobody records.
    const known = (id: string) => this.sandboxes.has(id);
    for (const id of containers.keys()) {
      if (!known(id)) {
        await this.o.runtime.delete(id, signal).catch(() => undefined);
        reclaimed.push(id);
      }
    }
    for (const id of disks) {
      if (!known(id) && /^[a-z0-9]{20}$/.test(id)) {
        await this.releaseDisk(id).catch(() => undefined);
        if (!reclaimed.includes(id)) reclaimed.push(id);
      }
    }
    for (const dir of Object.values(this.o.runtime.cgroupDirs("x"))) {
      const parent = dir.slice(0, -2);
      for (const id of await readdir(parent).catch(() => [] as string[])) {
        if (/^[a-z0-9]{20}$/.test(id) && !known(id)) await rmdir(join(parent, id)).catch(() => undefined);
      }
    }
    if (reclaimed.length || adopted.length || stopped.length) this.o.logger.info({ adopted, stopped, reclaimed }, "node reconciled");
    return { adopted, stopped, reclaimed };
  }

  /** Whether `id` keeps its network slot after reconcile (running or paused). */
  keepsSlot(id: string): boolean {
    const s = this.sandboxes.get(id);
    return Boolean(s && (s.state === "running" || s.state === "paused"));
  }
}

const ms = (t: number) => Math.round((performance.now() - t) * 10) / 10;
/** cgroup v1 cpu.shares: the kernel default, and a background sandbox's (1/8: it still boots on a busy node, envd must answer within its ready timeout). */
const DEFAULT_CPU_SHARES = 1024;
const BACKGROUND_CPU_SHARES = 128;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      srv.close(() => (a && typeof a === "object" ? resolve(a.port) : reject(new Error("no port"))));
    });
    srv.on("error", reject);
  });
}

/** The egress policy of a spec: its compiled policy, else all-or-nothing. */
export function egressOf(spec: Pick<SandboxSpec, "allowInternetAccess" | "network">): EgressPolicy {
  return spec.network ?? (spec.allowInternetAccess ? OPEN_POLICY : CLOSED_POLICY);
}
