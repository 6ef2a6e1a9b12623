/**
 * Boots a sandbox whose disk and network are in place: the runtime bundle (envd as init,
 * the template's env, the sandbox's resources), the runtime start (or a restore from a
 * memory checkpoint), envd's readiness, envd's /init, then the template's start command
 * and its ready check. Each phase's time lands in the sandbox's timings.
 *
 * Readiness: a fresh boot waits for envd's word on the readiness FIFO (envd-ready.ts;
 * `envdEventMs` in the timings); a boot whose FIFO could not be made and an init that
 * closed it without the word are checked over HTTP instead (`envdPollMs`), and so is a
 * restore from memory, by its /init itself (no `initMs` then). `envdMs` is the phase
 * either way.
 */
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { inChildSpan } from "../../core/tracing.ts";
import type { Runtime, RunSpec } from "../../runtime/runtime.ts";
import type { SandboxSpec } from "../../contract/node-api.ts";
import { ENVD_INIT_PATH, type EnvdInitBody } from "../../contract/envd-init.ts";
import type { SandboxDisks } from "../disk/sandbox-disks.ts";
import type { VolumeDisks } from "../disk/volume-disks.ts";
import { BootQueue } from "./boot-queue.ts";
import { httpStatusOf, waitEnvdHealthy } from "./envd-http-client.ts";
import { READY_FD, ReadyFifo } from "./envd-ready.ts";
import { ENVD_MOUNT, envdLaunch, NODE_MOUNT, type EnvdLaunch } from "./envd-launch.ts";
import type { RootfsTrust } from "../templates/ca-trust.ts";
import type { NetworkAttachments } from "./network-attachments.ts";
import { startTemplateCommand, templateBoot, waitTemplateReady, type TemplateBoot } from "./template-boot.ts";

/** How a sandbox is restored instead of created (node/snapshots). */
export interface RestoreVia {
  /**
   * Sets up the sandbox's disk: its root path, and its qgroup limit in `limited` (awaited
   * after the boot, as a create's; a failed limit fails the restore and releases the disk).
   */
  disk(signal: AbortSignal): Promise<{ root: string; limited: Promise<void> }>;
  /** Starts the prepared bundle from the memory checkpoint; absent (a disk snapshot): a fresh boot of that disk. */
  start?: (id: string, signal: AbortSignal) => Promise<void>;
  /** The sandbox the checkpoint was taken of (another one for forks and template captures). */
  sourceSandboxId?: string;
  /** Its sockets need none of the network's set-up (wildcard listeners only): restored beside it, awaited after, as a boot is. */
  beforeNetwork?: boolean;
}

/** An init that holds the readiness fd this long without a word is checked over HTTP instead. */
const READY_EVENT_GRACE_MS = 2000;

/** cgroup v1 cpu.shares: the kernel default, and a background sandbox's (1/8: it still boots on a busy node, envd must answer within its ready timeout). */
export const DEFAULT_CPU_SHARES = 1024;
const BACKGROUND_CPU_SHARES = 128;

export interface SandboxBootOptions {
  runtime: Runtime;
  disks: SandboxDisks;
  /** Volumes bind-mounted into sandboxes; absent (the process runtime) = a spec with volumes is refused. */
  volumes?: VolumeDisks;
  network: NetworkAttachments;
  /**
   * Init stdio on /dev/null instead of a log file (runc): CRIU cannot dump a host file the
   * container's mount namespace does not see (memory checkpoints, node/snapshots).
   */
  discardInitOutput: boolean;
  /** Host dir with envd.mjs (and envd.blob, its startup snapshot), mounted read-only at /opt/space/envd. */
  envdDir: string;
  /** Host Node.js binary, mounted read-only at /opt/space/bin/node. */
  nodeBinary: string;
  pidsLimit?: number;
  /** The operator's CAs, appended to each rootfs's trust store (SPACE_EXTRA_CA_CERTS_IN_SANDBOXES); absent = none. */
  trust?: RootfsTrust;
  envdReadyTimeoutMs?: number;
  /** Boots from the runtime start to envd's readiness at once (boot-queue.ts); 0 or absent = twice the CPUs. */
  bootConcurrency?: number;
  /** Bound on a template's ready command after its start command (default 30 s; past it the sandbox runs anyway). */
  templateReadyTimeoutMs?: number;
  logger: Logger;
}

/** What boot reads of a sandbox. */
export interface BootTarget {
  spec: SandboxSpec;
  address: string;
  envdPort: number;
}

/** Where a sandbox boots: its root filesystem and network, and how (`via`: restored from a snapshot). */
export interface BootPlace {
  rootfs: string;
  /** The network namespace to join; absent = the host's. */
  netnsPath?: string;
  /** Settles once the network is fully set up. */
  configured: Promise<void>;
  via?: RestoreVia;
  /** The readiness FIFO, when the caller began making it earlier (`readyFifo`); else boot makes it. */
  ready?: Promise<ReadyFifo | undefined>;
}

export class SandboxBooter {
  private readonly o: SandboxBootOptions;
  /** Where the init's output goes (unless discarded). */
  private readonly logsDir: string;
  /** Where the readiness FIFOs are made (the node's, never a sandbox's filesystem). */
  private readonly readyDir: string;
  private launch: Promise<EnvdLaunch> | undefined;
  readonly #boots: BootQueue;
  /** The logs dir, made once (again after a failure). */
  #logsMade: Promise<void> | undefined;
  /** The bound of envd's log ring (src/envd/log-ring.ts). */
  private readonly envdLogEntries: number;

  /** `o` is read at each boot (the manager's own options, shared). */
  constructor(o: SandboxBootOptions, dirs: { logs: string; ready: string }, envdLogEntries: number) {
    this.o = o;
    this.logsDir = dirs.logs;
    this.readyDir = dirs.ready;
    this.envdLogEntries = envdLogEntries;
    this.#boots = new BootQueue(o.bootConcurrency ?? 0);
  }

  /** The spec's volumes as bind mounts, each made on this node first when it is new here. */
  async #volumeMounts(spec: SandboxSpec, signal: AbortSignal): Promise<RunSpec["mounts"]> {
    if (!spec.volumes?.length) return [];
    const v = this.o.volumes;
    if (!v) throw new SpaceError("failed_precondition", "volumes need the btrfs node cache (an isolated runtime) on this node");
    const out: RunSpec["mounts"] = [];
    for (const m of spec.volumes) {
      await v.ensure(m.volumeId, m.sizeMib, signal);
      out.push({ source: v.path(m.volumeId), destination: m.path, readonly: m.readOnly });
    }
    return out;
  }

  #logsDir(): Promise<void> {
    this.#logsMade ??= mkdir(this.logsDir, { recursive: true }).then(
      () => undefined,
      (e: unknown) => {
        this.#logsMade = undefined;
        throw e;
      },
    );
    return this.#logsMade;
  }

  /**
   * The readiness FIFO of a fresh boot of `id` (an exec: callers start it beside other work);
   * undefined when it cannot be made (readiness is then checked over HTTP). Never rejects.
   */
  readyFifo(id: string, signal: AbortSignal): Promise<ReadyFifo | undefined> {
    return ReadyFifo.create(this.readyDir, id, signal).catch((e: unknown) => {
      this.o.logger.warn({ sandboxId: id, err: e }, "no readiness FIFO: envd's readiness is checked over HTTP");
      return undefined;
    });
  }

  /** Bundle, runtime start, envd readiness, envd init, template start command. */
  async boot(s: BootTarget, place: BootPlace, timings: Record<string, number>, signal: AbortSignal): Promise<void> {
    // A restore from memory brings envd back listening: there is nobody to signal.
    const fifo = place.via?.start ? undefined : (place.ready ?? this.readyFifo(s.spec.sandboxId, signal));
    try {
      await this.#boot(s, place, fifo, timings, signal);
    } finally {
      await (await fifo)?.close();
    }
  }

  async #boot(
    s: BootTarget,
    { rootfs, netnsPath, configured: slotConfigured, via }: BootPlace,
    fifoP: Promise<ReadyFifo | undefined> | undefined,
    timings: Record<string, number>,
    signal: AbortSignal,
  ): Promise<void> {
    const id = s.spec.sandboxId;
    const t = performance.now();
    const init = via || s.spec.accessToken !== undefined || Object.keys(s.spec.envVars).length ? { envVars: s.spec.envVars, accessToken: s.spec.accessToken } : undefined;
    // A restore from memory comes back listening: its /init is its readiness check, one round trip fewer.
    let initAnswer: number | undefined;
    // The identity files and the bundle are independent: written at the same time.
    const identity = this.o.network.writeIdentity(id, s.address, rootfs);
    identity.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
    if (this.o.trust && !via?.start) await this.o.trust.apply(rootfs);
    // A restore from memory brings envd's state and the processes back: nothing to apply.
    const tb: TemplateBoot = via?.start ? { env: {} } : templateBoot(await this.o.disks.templateInfo(s.spec.template));
    const templateEnv = Object.fromEntries(Object.entries(tb.env).filter(([k]) => !k.startsWith("SPACE_ENVD_")));
    const env: Record<string, string> = {
      PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      HOME: "/root",
      ...this.o.trust?.env,
      // The template's ENV: defaults under the sandbox's own env vars.
      ...templateEnv,
      E2B_SANDBOX: "true",
      E2B_SANDBOX_ID: id,
      ...s.spec.envVars,
      // envd's knobs (not passed on to processes): the template's WORKDIR and USER.
      ...(tb.workdir ? { SPACE_ENVD_DEFAULT_WORKDIR: tb.workdir } : {}),
      ...(tb.user ? { SPACE_ENVD_DEFAULT_USER: tb.user } : {}),
      SPACE_ENVD_LOG_ENTRIES: String(this.envdLogEntries),
    };
    // Made meanwhile (an exec); envd is told its fd only when there is one.
    const fifo = await fifoP;
    if (fifo) env.SPACE_ENVD_READY_FD = String(READY_FD);
    this.launch ??= envdLaunch(this.o.envdDir, this.o.nodeBinary, this.o.logger);
    const args = (await this.launch).argv(s.envdPort);
    const volumeMounts = await this.#volumeMounts(s.spec, signal);
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
        ...volumeMounts,
      ],
      ...(netnsPath ? { netnsPath } : {}),
      resources: {
        vcpu: s.spec.vcpu,
        memoryMib: s.spec.memoryMib,
        pidsLimit: this.o.pidsLimit ?? 1024,
        ...(s.spec.background ? { cpuShares: BACKGROUND_CPU_SHARES } : {}),
      },
      logPath: this.o.discardInitOutput ? "/dev/null" : join(this.logsDir, `${id}.log`),
    };
    await Promise.all([identity, this.#logsDir(), this.o.runtime.prepare(run, signal)]);
    // runtimeMs = bundleMs (identity files, template info, FIFO, bundle) + the start itself.
    const bundleMs = (timings.bundleMs = ms(t));
    // From the start to envd's word: at most the boot queue.s number of boots at once (boot-queue.ts).
    const tGate = performance.now();
    await this.#boots.run(s.spec.background === true, signal, async () => {
      timings.bootWaitMs = ms(tGate);
      const tRun = performance.now();
      if (via?.start) {
        // A memory checkpoint comes back with its sockets: its addresses must be in place.
        // (Measured: restoring while the slot or the disk quota is still being set up won under
        // heavy load but lost 40-100 ms on a quieter 2-core node, CPU and btrfs contention.)
        if (!via.beforeNetwork) await slotConfigured;
        await inChildSpan("runtime restore", "runtime", { "space.sandbox.id": id }, () => via.start!(id, signal));
      } else
        await inChildSpan("runtime start", "runtime", { "space.sandbox.id": id, "space.runtime": this.o.runtime.kind }, () =>
          this.o.runtime.start(id, signal, fifo ? { readyFifo: fifo.path } : {}),
        );
      timings.runtimeStartMs = ms(tRun);
      timings.runtimeMs = Math.round((bundleMs + timings.runtimeStartMs) * 10) / 10;
      // The slot's setup overlapped the disk and the runtime start; what is left of it is on the path.
      const tSlot = performance.now();
      await slotConfigured;
      timings.slotWaitMs = ms(tSlot);
      const tEnvd = performance.now();
      await inChildSpan("node envd ready", "node", { "space.sandbox.id": id }, async () => {
        const deadlineMs = this.o.envdReadyTimeoutMs ?? 15_000;
        const alive = async () => (await this.o.runtime.state(id, signal))?.status === "running";
        const failed = async (e: unknown): Promise<never> => {
          const tail = await readFile(run.logPath, "utf8")
            .then((x) => x.slice(-1500))
            .catch(() => "");
          throw new SpaceError(
            "unavailable",
            `${e instanceof Error ? e.message : String(e)}${tail ? `; init log: ${tail.trim()}` : ""}`,
          );
        };
        const word = fifo ? await fifo.wait(Math.min(READY_EVENT_GRACE_MS, deadlineMs), signal).catch(failed) : undefined;
        if (word === "ready") timings.envdEventMs = ms(tEnvd);
        else {
          // Every writer gone without the word: the init died, or it does not signal.
          if (word === "closed" && !(await alive())) await failed(new Error("the sandbox's init exited before envd was ready"));
          const left = Math.max(1, deadlineMs - (performance.now() - tEnvd));
          const probe = via?.start && init ? () => this.#postInit(s, init) : undefined;
          const answer = await waitEnvdHealthy(s.address, s.envdPort, { deadlineMs: left, signal, alive, ...(probe ? { probe } : {}) }).catch(failed);
          if (probe) initAnswer = answer;
          timings.envdPollMs = ms(tEnvd);
        }
      });
      timings.envdMs = ms(tEnvd);
    });
    if (init && initAnswer !== undefined) initAnswered(s, initAnswer);
    else if (init) {
      const tInit = performance.now();
      await this.initEnvd(s, init);
      timings.initMs = ms(tInit);
    }
    if (tb.startCmd) {
      const tStart = performance.now();
      await startTemplateCommand(s.address, s.envdPort, s.spec.accessToken, tb.startCmd, signal).catch((e: unknown) => {
        throw new SpaceError(
          "failed_precondition",
          `the template's start command could not be started: ${e instanceof Error ? e.message : String(e)}`,
        );
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
  async initEnvd(s: BootTarget, body: InitBody, token = s.spec.accessToken): Promise<void> {
    initAnswered(s, await this.#postInit(s, body, token));
  }

  /** `token`: the one envd holds now, which authenticates the call (a changed one is in `body`). */
  #postInit(s: BootTarget, body: InitBody, token = s.spec.accessToken): Promise<number> {
    return httpStatusOf(s.address, s.envdPort, ENVD_INIT_PATH, {
      method: "POST",
      timeoutMs: 5000,
      body: JSON.stringify({ ...body, timestamp: new Date().toISOString() }),
      headers: { "content-type": "application/json", ...(token ? { "x-access-token": token } : {}) },
    });
  }
}

/** What the node sets at /init; envd keeps its own default user and workdir. */
type InitBody = Pick<EnvdInitBody, "envVars" | "accessToken">;

/** An envd too old for /init (404) is fine; any other refusal fails the boot. */
function initAnswered(s: BootTarget, status: number): void {
  if (status >= 300 && status !== 404) throw new SpaceError("unavailable", `envd /init of ${s.spec.sandboxId} answered ${status}`);
}

export const ms = (t: number) => Math.round((performance.now() - t) * 10) / 10;
