/**
 * sandbox-manager: the node-side lifecycle of sandboxes. Prepare (disk + network + bundle)
 * with a LIFO cleanup stack so a failure never leaves half-created state, start, pause /
 * resume (freezer), stop (processes end, disk kept) / start again, kill (everything
 * released), and the startup reconcile that adopts survivors and reclaims orphans.
 * Every host object is named after the sandbox id. Its metrics history and logs are the
 * telemetry's (sandbox-telemetry.ts), told when a sandbox arrives, is checkpointed and leaves.
 * Disks and networks come in as seams
 * (SandboxDisks, NetworkAttachments): btrfs and network slots for the OCI runtimes, plain
 * directories and the host's network for the process runtime.
 */
import { EventEmitter } from "node:events";
import { readdir, readFile, rm, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { SpaceError } from "../../core/errors.ts";
import { inBackground, isBackground, restorePriority } from "../../core/priority.ts";
import { ENVD_PORT, type SandboxMetrics, type SandboxSpec, type SandboxStatus } from "../../contract/node-api.ts";
import { CLOSED_POLICY, OPEN_POLICY, type EgressPolicy, type NetworkRecord } from "../../contract/egress-policy.ts";
import { CleanupStack } from "./cleanup-stack.ts";
import { DEFAULT_CPU_SHARES, ms, SandboxBooter, type RestoreVia, type SandboxBootOptions } from "./sandbox-boot.ts";
import { sandboxMetrics } from "./sandbox-metrics.ts";
import { ForegroundActivity } from "../../core/foreground-activity.ts";
import { DEFAULT_TELEMETRY, SandboxTelemetry, type Observed, type TelemetryOptions } from "./sandbox-telemetry.ts";
import type { SandboxLogEntry } from "../../contract/envd-logs.ts";
import type { LogQuery } from "../../contract/sandbox-logs.ts";
import { LocalSandboxRecords, type LocalSandboxRecord } from "./local-sandbox-records.ts";
import { canTransition, type NodeState } from "./states.ts";

export interface SandboxManagerOptions extends SandboxBootOptions {
  nodeDir: string;
  stopGraceMs?: number;
  /** Metrics sampling and log retention (config: SPACE_METRICS_*, SPACE_SANDBOX_LOG_*). */
  telemetry?: Partial<TelemetryOptions>;
  /** The node's foreground work (creates, adoptions), shared with what else on the node yields to it; absent: the manager's own. */
  foreground?: ForegroundActivity;
}

interface Live extends LocalSandboxRecord {
  /** Serializes lifecycle calls on one sandbox. */
  lock: Promise<unknown>;
  cpuSample?: { at: number; usageNs: number };
  diskSample?: { at: number; usedBytes: number };
}

/** The periodic sampling reads a sandbox's disk usage (a btrfs exec) at most this often. */
const DISK_SAMPLE_MAX_AGE_MS = 30_000;
/** Bound on releasing a suspended sandbox's host objects behind the suspend's answer. */
const RECLAIM_MS = 120_000;

export class SandboxManager {
  private readonly o: SandboxManagerOptions;
  private readonly sandboxes = new Map<string, Live>();
  /** Emits `dead:<id>` when a sandbox is stopped or killed: proxies cut their streams. */
  readonly events = new EventEmitter();
  private readonly records: LocalSandboxRecords;
  private readonly logsDir: string;
  private readonly booter: SandboxBooter;
  /** Metrics history and logs; the agent starts and stops its tick. */
  readonly telemetry: SandboxTelemetry;
  /** Creates and adoptions a caller waits for: the node's background work yields to them. */
  readonly foreground: ForegroundActivity;

  constructor(o: SandboxManagerOptions) {
    this.o = o;
    this.foreground = o.foreground ?? new ForegroundActivity();
    this.records = new LocalSandboxRecords(join(o.nodeDir, "sandboxes"));
    this.logsDir = join(o.nodeDir, "logs");
    const telemetry = { ...DEFAULT_TELEMETRY, ...o.telemetry };
    this.booter = new SandboxBooter(o, { logs: this.logsDir, ready: join(o.nodeDir, "ready") }, telemetry.logEntries);
    this.events.setMaxListeners(0);
    this.telemetry = new SandboxTelemetry({
      dir: join(o.nodeDir, "sandbox-logs"),
      options: telemetry,
      observed: () => [...this.sandboxes.values()].filter((s) => s.state !== "creating" && s.state !== "killing").map(observedOf),
      sample: (id, signal) => sandboxMetrics(this.o.runtime, this.o.disks, this.mustGet(id), signal, DISK_SAMPLE_MAX_AGE_MS),
      foreground: this.foreground,
      logger: o.logger,
    });
  }

  /** The running sandboxes as the telemetry and the health watchdog see them. */
  running(): Observed[] {
    return [...this.sandboxes.values()].filter((s) => s.state === "running").map(observedOf);
  }

  list(): SandboxStatus[] {
    return [...this.sandboxes.values()].filter((s) => s.state !== "creating" && s.state !== "killing").map((s) => this.toStatus(s));
  }
  count(): number {
    return this.sandboxes.size;
  }
  /**
   * Sandboxes whose memory a measurement of the host now holds in full: resident ones (not
   * stopped) that are done booting. One still creating or starting is still growing (its
   * runtime and envd are loading), so the capacity model counts it at its request instead.
   */
  settled(): number {
    let n = 0;
    for (const s of this.sandboxes.values()) if (s.state !== "stopped" && s.state !== "creating" && s.state !== "starting") n++;
    return n;
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
   * `via` (snapshots): the disk comes from a snapshot and, unless it is a disk snapshot,
   * the processes from a memory checkpoint instead of the template and a cold boot
   * (node/snapshots).
   */
  async create(spec: SandboxSpec, signal: AbortSignal, via?: RestoreVia): Promise<SandboxStatus> {
    if (spec.background && !isBackground()) return inBackground(() => this.create(spec, signal, via));
    return spec.background ? this.runCreate(spec, signal, via) : this.foreground.run(() => this.runCreate(spec, signal, via));
  }

  private async runCreate(spec: SandboxSpec, signal: AbortSignal, via?: RestoreVia): Promise<SandboxStatus> {
    const t0 = performance.now();
    const id = spec.sandboxId;
    const ending = this.sandboxes.get(id);
    // Still being released (a suspend answers before that, a kill may be under way): wait for it.
    if (ending?.state === "killing") await ending.lock.catch(() => undefined);
    const existing = this.sandboxes.get(id);
    if (existing?.state === "killing") throw new SpaceError("unavailable", `sandbox ${id} is still being released on this node`);
    if (existing) {
      if (existing.spec.executionId === spec.executionId) {
        await existing.lock.catch(() => undefined);
        return this.get(id);
      }
      throw new SpaceError("already_exists", `sandbox ${id} already exists on this node`);
    }
    // Refuse at once, before any work: a disk below the template's rootfs, a full node. A
    // restore is admitted by the snapshot layer (its parent may not be a template of this node).
    if (!via) await this.o.disks.admit(spec.template, spec.diskMib);

    const s: Live = { spec, state: "creating", address: "", envdPort: ENVD_PORT, startedAt: new Date().toISOString(), lock: Promise.resolve() };
    this.sandboxes.set(id, s);
    const stack = new CleanupStack();
    stack.defer("forget", () => {
      this.sandboxes.delete(id);
    });
    try {
      await this.withLock(s, async () => {
        await this.records.save(s);
        stack.defer("record", () => this.records.remove(id));
        const timings: Record<string, number> = {};
        // The readiness FIFO (an exec) is made beside the disk and the slot, off the path.
        const ready = via?.start ? undefined : this.booter.readyFifo(id, signal);
        stack.defer("ready", async () => (await ready)?.close());
        // Disk and slot are independent: set them up in parallel. The container starts as
        // soon as the slot's netns exists; the rest of the slot is set up meanwhile.
        const tDisk = performance.now();
        const diskP = (
          via ? via.disk(signal) : this.o.disks.snapshotSandboxDisk(id, spec.template, spec.diskMib, signal)
        ).then((d) => {
          timings.diskMs = ms(tDisk);
          return d;
        });
        const slotP = this.attach(s, signal).then(({ netnsPath, configured }) => ({
          netnsPath,
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
        await this.booter.boot(s, { rootfs: disk.value.root, ...slot.value, via, ...(ready ? { ready } : {}) }, timings, signal);
        await disk.value.limited; // the qgroup limit, overlapped with the boot
        timings.totalMs = ms(t0);
        s.timings = timings;
        this.transition(s, "running");
        await this.records.save(s);
      });
      stack.move(); // success: the sandbox owns its disk, slot and container now
      this.telemetry.arrived(observedOf(s), via?.sourceSandboxId !== undefined && via.sourceSandboxId !== id);
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

  private releaseDisk(id: string, keepFor?: string): Promise<void> {
    return this.o.disks.releaseSandboxDisk(id, AbortSignal.timeout(60_000), keepFor ? { keepFor } : undefined);
  }
  /** Resolves once the sandbox's network exists (its address is set); `configured` once it is fully set up. */
  private async attach(s: Live, signal: AbortSignal): Promise<{ netnsPath?: string; configured: Promise<void> }> {
    const { attachment, configured } = await this.o.network.open(s.spec.sandboxId, egressOf(s.spec), signal);
    s.address = attachment.address;
    s.envdPort = attachment.envdPort ?? ENVD_PORT;
    return { netnsPath: attachment.netnsPath, configured };
  }
  /**
   * A network slot for `id` (not yet here) with `like`'s egress policy, set up now and kept as
   * a suspended sandbox's is: a restore of `id` here takes it (a fork's, made beside its capture).
   */
  async keepSlotLike(id: string, like: string, signal: AbortSignal): Promise<void> {
    if (this.sandboxes.has(id)) throw new SpaceError("already_exists", `sandbox ${id} already exists on this node`);
    const { configured } = await this.o.network.open(id, egressOf(this.mustGet(like).spec), signal);
    await configured;
    await this.releaseSlot(id, { keep: true });
  }
  private releaseSlot(id: string, o?: { keep?: boolean }): Promise<void> {
    return this.o.network.release(id, AbortSignal.timeout(60_000), o);
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
      await this.records.save(s);
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
      await this.records.save(s);
      return this.toStatus(s);
    });
  }

  /**
   * Suspend (node/snapshots): `snapshot` checkpoints the memory (the processes end) and
   * snapshots the disk; then everything the sandbox holds here is released. When that
   * fails the sandbox is left running (CRIU resumes the processes on a failed dump).
   *
   * Answered once the capture is safe and the sandbox has left (`killing`: no longer on this
   * node for get, list or telemetry); its container, slot and disk are released behind the
   * answer (~50-150 ms of process runs), under its lock: a create of the same id, such as a
   * restore here at once, waits for them. Its slot's namespace is this node's own
   * (slots.ts), so another agent on the host may restore the id meanwhile.
   */
  async suspend(id: string, capture: () => Promise<void>, signal: AbortSignal, o: { keepDiskFor?: string } = {}): Promise<void> {
    const s = this.mustGet(id);
    let answer!: () => void;
    const left = new Promise<void>((r) => (answer = r));
    const done = this.withLock(s, async () => {
      if (s.state === "paused") {
        await this.o.runtime.resume(id, signal);
        s.state = "running";
      }
      if (s.state !== "running") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
      await this.telemetry.quiesce(observedOf(s));
      try {
        await capture();
      } catch (e) {
        this.telemetry.resumed(id);
        throw e;
      }
      s.state = "killing";
      // Recorded so: an agent restarted before the release below reclaims it (reconcile).
      await this.records.save(s);
      this.events.emit(`dead:${id}`);
      await this.telemetry.left(id);
      answer();
      // Not the caller's signal: its request has been answered.
      // Its slot is kept a moment: a restore here at once (pause, then connect) takes it back.
      await this.reclaim(id, AbortSignal.timeout(RECLAIM_MS), { keepSlot: true, keepDiskFor: o.keepDiskFor }).then(
        () => this.sandboxes.delete(id),
        // Left in the map as `killing`: a kill retries, a create of the id refuses.
        (e: unknown) => this.o.logger.error({ sandboxId: id, err: e }, "releasing a suspended sandbox's host objects failed"),
      );
    });
    await Promise.race([left, done]);
  }

  /** Runs `fn` (a capture: fork, named snapshot) while no other lifecycle call runs on `id`. */
  async withRunning<T>(id: string, fn: (st: SandboxStatus) => Promise<T>): Promise<T> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state !== "running" && s.state !== "paused") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
      await this.telemetry.quiesce(observedOf(s));
      try {
        return await fn(this.toStatus(s));
      } finally {
        this.telemetry.resumed(id);
      }
    });
  }

  /** Processes end; the disk is kept; the network slot is released. */
  async stop(id: string, signal: AbortSignal): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    return this.withLock(s, async () => {
      if (s.state === "stopped") return this.toStatus(s);
      if (s.state === "running") await this.telemetry.quiesce(observedOf(s));
      this.transition(s, "stopped");
      this.events.emit(`dead:${id}`);
      await this.telemetry.left(id);
      await this.o.runtime.stop(id, this.o.stopGraceMs ?? 2000, signal);
      await this.releaseSlot(id);
      s.address = "";
      s.timings = undefined;
      await this.records.save(s);
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
        const rootfs = this.o.disks.sandboxRoot(id);
        const { netnsPath, configured } = await this.attach(s, signal);
        stack.defer("slot", () => configured.catch(() => undefined).then(() => this.releaseSlot(id)));
        await configured;
        timings.slotMs = ms(t0);
        stack.defer("runtime", () => this.o.runtime.stop(id, 0, AbortSignal.timeout(60_000)));
        await this.booter.boot(s, { rootfs, netnsPath, configured }, timings, signal);
        timings.totalMs = ms(t0);
        s.timings = timings;
        s.startedAt = new Date().toISOString();
        s.state = "running";
        await this.records.save(s);
        stack.move();
        this.telemetry.arrived(observedOf(s), false);
        return this.toStatus(s);
      } catch (e) {
        await stack.run().catch(() => undefined);
        s.state = "stopped";
        s.address = "";
        throw SpaceError.from(e);
      }
    });
  }

  init(id: string, body: { envVars?: Record<string, string>; accessToken?: string }): Promise<SandboxStatus> {
    return this.foreground.run(() => this.runInit(id, body));
  }

  private async runInit(id: string, body: { envVars?: Record<string, string>; accessToken?: string }): Promise<SandboxStatus> {
    const s = this.mustGet(id);
    if (s.state !== "running") throw new SpaceError("failed_precondition", `sandbox ${id} is ${s.state}, not running`);
    // envd is asked with the token it holds now (a warm member's own, which an adoption may clear or replace).
    const held = s.spec.accessToken;
    if (body.envVars) s.spec.envVars = { ...s.spec.envVars, ...body.envVars };
    if (body.accessToken !== undefined) s.spec.accessToken = body.accessToken;
    const initEnvd = body.envVars || body.accessToken !== undefined;
    const background = s.spec.background;
    delete s.spec.background;
    await Promise.all([
      (async () => {
        // Full CPU weight first: envd answers /init at the weight it then has.
        if (background) await this.toForeground(s);
        if (initEnvd) await this.booter.initEnvd(s, body, held);
      })(),
      this.records.save(s),
    ]);
    return this.toStatus(s);
  }

  /**
   * A background sandbox (warm member) gets the default CPU weight and normal niceness back.
   * Through the thread pool: synchronous, the cgroup write held the loop ~0.7 ms per
   * adoption in a burst of 100 (CPU profile of `space up`).
   */
  private async toForeground(s: Live): Promise<void> {
    const dir = this.o.runtime.cgroupDirs(s.spec.sandboxId).cpu;
    if (!dir) return;
    await writeFile(join(dir, "cpu.shares"), String(DEFAULT_CPU_SHARES));
    // niceness is per thread on Linux: every task, not just each process.
    const tasks = await readFile(join(dir, "tasks"), "utf8").catch(() => ""); // no tasks file: nothing to renice
    restorePriority(tasks.split("\n").filter(Boolean).map(Number));
  }

  async setEgress(id: string, allowInternetAccess: boolean, signal: AbortSignal, policy?: EgressPolicy): Promise<void> {
    const s = this.mustGet(id);
    s.spec.allowInternetAccess = allowInternetAccess;
    s.spec.network = policy;
    await this.o.network.setPolicy(id, egressOf(s.spec), signal);
    await this.records.save(s);
  }

  /** What the sandbox's slot recorded: destinations observed (observe mode) and refused. */
  async networkRecord(id: string, signal: AbortSignal): Promise<NetworkRecord> {
    this.mustGet(id);
    return this.o.network.record(id, signal);
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
      if (s.state === "running") await this.telemetry.quiesce(observedOf(s));
      s.state = "killing";
      this.events.emit(`dead:${id}`);
      await this.telemetry.left(id);
      await this.reclaim(id, signal);
      this.sandboxes.delete(id);
    });
  }

  /** Releases every host object named after `id` (used by kill and the orphan sweep). */
  private async reclaim(id: string, signal: AbortSignal, o: { keepSlot?: boolean; keepDiskFor?: string } = {}): Promise<void> {
    const stack = new CleanupStack();
    // Registered in acquire order; run LIFO: record, disk, slot, runtime (container first).
    stack.defer("record", () => this.records.remove(id));
    stack.defer("log", () => rm(join(this.logsDir, `${id}.log`), { force: true }));
    stack.defer("disk", () => this.releaseDisk(id, o.keepDiskFor));
    stack.defer("slot", () => this.releaseSlot(id, { keep: o.keepSlot }));
    stack.defer("runtime", () => this.o.runtime.delete(id, signal));
    await stack.run();
  }

  // ---------------------------------------------------------------- metrics

  async metrics(id: string, signal: AbortSignal): Promise<SandboxMetrics> {
    return sandboxMetrics(this.o.runtime, this.o.disks, this.mustGet(id), signal);
  }

  /** Samples in the range (ms since the epoch), kept for a while after the sandbox left; [] for one never here. */
  metricsHistory(id: string, range: { startMs?: number; endMs?: number }): Promise<SandboxMetrics[]> {
    return this.telemetry.metrics(id, range, this.observed(id));
  }

  /** The sandbox's log entries the query selects (kept for a while after it left); [] for one never here. */
  logs(id: string, q: LogQuery): Promise<SandboxLogEntry[]> {
    return this.telemetry.queryLogs(id, q, this.observed(id));
  }

  private observed(id: string): Observed | undefined {
    const s = this.sandboxes.get(id);
    return s && s.state !== "creating" && s.state !== "killing" ? observedOf(s) : undefined;
  }

  // ---------------------------------------------------------------- reconcile

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
    const records = await this.records.list();
    // Readiness FIFOs of boots a previous agent never finished (nothing boots during a reconcile).
    await rm(join(this.o.nodeDir, "ready"), { recursive: true, force: true });
    const containers = new Map((await this.o.runtime.list(signal)).map((c) => [c.id, c]));
    const disks = new Set(await this.o.disks.listSandboxDisks());
    for (const r of records) {
      const id = r.spec.sandboxId;
      const c = containers.get(id);
      if (!disks.has(id) || r.state === "creating" || r.state === "killing" || (wanted && !wanted.has(id))) {
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
      await this.records.save(live);
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

function observedOf(s: Live): Observed {
  return { id: s.spec.sandboxId, running: s.state === "running", envd: { host: s.address, port: s.envdPort, accessToken: s.spec.accessToken } };
}

/** The egress policy of a spec: its compiled policy, else all-or-nothing. */
export function egressOf(spec: Pick<SandboxSpec, "allowInternetAccess" | "network">): EgressPolicy {
  return spec.network ?? (spec.allowInternetAccess ? OPEN_POLICY : CLOSED_POLICY);
}
