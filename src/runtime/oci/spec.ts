/**
 * Builds the OCI runtime config (config.json) of a sandbox. Pure: unit-tested.
 *
 * Security posture (the trade-off made here): envd runs as root (uid 0 inside, no user
 * namespace) because it starts processes as `user` and `sudo` must work for that user.
 * sudo is a setuid binary, so `noNewPrivileges` is false; the real walls are the
 * capability bounding set (no CAP_SYS_ADMIN, CAP_NET_RAW, CAP_SYS_MODULE, CAP_SYS_PTRACE,
 * CAP_MKNOD, CAP_NET_ADMIN...), the seccomp profile, the namespaces, masked /proc paths
 * and the cgroup limits. A spec for untrusted-only workloads can set noNewPrivileges.
 */
import { join } from "node:path";
import type { RunSpec } from "../runtime.ts";
import { defaultSeccompProfile } from "./seccomp.ts";

/** Docker's default set minus CAP_NET_RAW (raw sockets) and CAP_MKNOD. */
export const sandboxCapabilities = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_FSETID",
  "CAP_FOWNER",
  "CAP_SETGID",
  "CAP_SETUID",
  "CAP_SETPCAP",
  "CAP_SETFCAP",
  "CAP_NET_BIND_SERVICE",
  "CAP_KILL",
  "CAP_AUDIT_WRITE",
  "CAP_SYS_CHROOT",
] as const;

export const maskedPaths = [
  "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
  "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
];
export const readonlyPaths = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

export const CPU_PERIOD_US = 100_000;

export interface OciSpecOptions {
  /** cgroups path, e.g. `space/<id>` (relative to each v1 controller root). */
  cgroupsPath: string;
  noNewPrivileges?: boolean;
}

/**
 * The CRIU RPC config file of a runtime's containers, one beside their bundles (a sandbox
 * id has no dot): runc hands it to CRIU on checkpoint and restore (runtime/oci/checkpoint.ts
 * writes it), and its options override runc's own.
 */
export const CRIU_CONF = "criu.conf";
export const CRIU_CONF_ANNOTATION = "org.criu.config";
export function criuAnnotation(bundlesDir: string): Record<string, string> {
  return { [CRIU_CONF_ANNOTATION]: join(bundlesDir, CRIU_CONF) };
}

export function buildOciSpec(spec: RunSpec, opts: OciSpecOptions): Record<string, unknown> {
  const caps = [...sandboxCapabilities];
  const memBytes = spec.resources.memoryMib * 1024 * 1024;
  const namespaces: { type: string; path?: string }[] = [
    { type: "pid" },
    { type: "mount" },
    { type: "ipc" },
    { type: "uts" },
    { type: "cgroup" },
    spec.netnsPath ? { type: "network", path: spec.netnsPath } : { type: "network" },
  ];
  return {
    ociVersion: "1.0.2",
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: spec.args,
      env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
      cwd: spec.cwd,
      capabilities: { bounding: caps, effective: caps, permitted: caps, inheritable: [], ambient: [] },
      noNewPrivileges: opts.noNewPrivileges ?? false,
      oomScoreAdj: 500,
    },
    root: { path: spec.rootfs, readonly: false },
    hostname: spec.hostname,
    mounts: [
      { destination: "/proc", type: "proc", source: "proc", options: ["nosuid", "noexec", "nodev"] },
      { destination: "/dev", type: "tmpfs", source: "tmpfs", options: ["nosuid", "strictatime", "mode=755", "size=65536k"] },
      { destination: "/dev/pts", type: "devpts", source: "devpts", options: ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"] },
      { destination: "/dev/shm", type: "tmpfs", source: "shm", options: ["nosuid", "noexec", "nodev", "mode=1777", `size=${Math.max(64, Math.floor(spec.resources.memoryMib / 2))}m`] },
      { destination: "/dev/mqueue", type: "mqueue", source: "mqueue", options: ["nosuid", "noexec", "nodev"] },
      { destination: "/sys", type: "sysfs", source: "sysfs", options: ["nosuid", "noexec", "nodev", "ro"] },
      { destination: "/sys/fs/cgroup", type: "cgroup", source: "cgroup", options: ["nosuid", "noexec", "nodev", "relatime", "ro"] },
      { destination: "/run", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "mode=755", "size=65536k"] },
      ...spec.mounts.map((m) => ({
        destination: m.destination,
        type: "bind",
        source: m.source,
        options: ["rbind", "nosuid", "nodev", m.readonly ? "ro" : "rw"],
      })),
    ],
    linux: {
      namespaces,
      cgroupsPath: opts.cgroupsPath,
      resources: {
        devices: [{ allow: false, access: "rwm" }],
        memory: { limit: memBytes, swap: memBytes },
        cpu: { quota: spec.resources.vcpu * CPU_PERIOD_US, period: CPU_PERIOD_US, ...(spec.resources.cpuShares ? { shares: spec.resources.cpuShares } : {}) },
        pids: { limit: spec.resources.pidsLimit },
      },
      seccomp: defaultSeccompProfile(),
      maskedPaths,
      readonlyPaths,
    },
  };
}
