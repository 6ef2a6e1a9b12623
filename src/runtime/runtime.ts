/**
 * The Runtime seam: what the node needs from whatever runs a sandbox's processes.
 * Implementations: `oci` (runc / crun; real isolation) and `process` (plain processes,
 * no isolation, for non-root development). A microVM runtime would slot in here.
 *
 * Every method takes an AbortSignal. `delete` is idempotent (absent = ok).
 */
export type RuntimeKind = "runc" | "crun" | "process";

/** What a sandbox run needs, independent of how it is isolated. */
export interface RunSpec {
  /** Runtime container id: the sandbox id, so a startup sweep can reclaim orphans. */
  id: string;
  /** Writable root filesystem (the sandbox's disk). */
  rootfs: string;
  hostname: string;
  /** argv of the container's init (envd). */
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** Host paths bound into the sandbox. */
  mounts: { source: string; destination: string; readonly: boolean }[];
  /** Path of the network namespace to join (`/run/netns/<id>`); absent = host network (process runtime). */
  netnsPath?: string;
  /** `cpuShares`: relative CPU weight (cgroup cpu.shares; absent = the default 1024). */
  resources: { vcpu: number; memoryMib: number; pidsLimit: number; cpuShares?: number };
  /** Files the runtime points the init's stdout/stderr at (kept by the node; CRIU cannot dump deleted files). */
  logPath: string;
}

export interface StartOptions {
  /**
   * Host path of a FIFO the node holds open for reading: the init gets its write end, and
   * nothing else, as fd 3 (envd writes "ready" there once it listens and closes it;
   * node/sandboxes/envd-ready.ts). Absent: the init gets no fd 3.
   */
  readyFifo?: string;
}

export type RuntimeStatus = "creating" | "created" | "running" | "paused" | "stopped";

export interface RuntimeState {
  id: string;
  status: RuntimeStatus;
  /** Host pid of the init, 0 when not running. */
  pid: number;
}

export interface Runtime {
  readonly kind: RuntimeKind;
  /** Version string of the runtime binary (part of the execution environment). */
  version(signal: AbortSignal): Promise<string>;
  /** Writes whatever the runtime needs to start `spec` (OCI bundle); returns the bundle dir. */
  prepare(spec: RunSpec, signal: AbortSignal): Promise<string>;
  /** Starts the prepared sandbox detached; resolves once its init runs. */
  start(id: string, signal: AbortSignal, opts?: StartOptions): Promise<void>;
  /** Freezes every process (cgroup freezer). */
  pause(id: string, signal: AbortSignal): Promise<void>;
  resume(id: string, signal: AbortSignal): Promise<void>;
  /** SIGTERM to the init, SIGKILL after `graceMs`; the container record is removed, the bundle kept. */
  stop(id: string, graceMs: number, signal: AbortSignal): Promise<void>;
  /** Kills and forgets everything of `id` (container, cgroup, bundle). Absent = ok. */
  delete(id: string, signal: AbortSignal): Promise<void>;
  /** null when the runtime does not know `id`. */
  state(id: string, signal: AbortSignal): Promise<RuntimeState | null>;
  list(signal: AbortSignal): Promise<RuntimeState[]>;
  /** cgroup paths (v1 controller → dir) for metrics; empty when the runtime has none. */
  cgroupDirs(id: string): Record<string, string>;
  /** Runs a command inside the sandbox (tests and diagnostics; user traffic goes through envd). */
  execIn(id: string, argv: string[], opts: { timeoutMs?: number; user?: string; signal?: AbortSignal }): Promise<{ exitCode: number | null; stdout: string; stderr: string }>;
}
