/**
 * Fast cgroup migrations: the cgroup2 `favordynmods` mount option (Linux 6.0+).
 *
 * Every `runc run` moves its init, and every `runc restore` moves CRIU, into the sandbox's
 * cgroups. Without the option the kernel's first move waits for an RCU grace period
 * (cgroup_threadgroup_rwsem's writer side): ~9 ms per move measured on this host (cgroup v1
 * hierarchies included: the lock is global), ~0.1 ms with it. The option trades that for
 * slightly dearer fork and exit host-wide, the right trade on a host that starts and restores
 * sandboxes. It is a flag of the one cgroup2 superblock: a remount sets it for every mount of
 * it. Nothing here clears it: on Linux 6.18 a remount without it leaves the kernel half
 * switched (the per-threadgroup lock mode stays), so it stays until the next boot.
 */
import { readFile } from "node:fs/promises";
import { exec } from "../../core/exec.ts";
import type { Logger } from "../../core/log.ts";

const OPTION = "favordynmods";

export interface Cgroup2Mount {
  /** Where it is mounted (the first such mount in mountinfo). */
  target: string;
  /** Its superblock options (`rw,nsdelegate,…`). */
  superOptions: string[];
}

/** The cgroup2 mount in a /proc/self/mountinfo text, or undefined on a v1-only host. */
export function cgroup2Mount(mountinfo: string): Cgroup2Mount | undefined {
  for (const line of mountinfo.split("\n")) {
    // `<id> <parent> <dev> <root> <target> <opts> [optional…] - <fstype> <source> <super options>`
    const [left, right] = line.split(" - ");
    if (!left || !right) continue;
    const [fstype, , superOptions] = right.split(" ");
    if (fstype !== "cgroup2") continue;
    const target = (left.split(" ")[4] ?? "").replace(/\\040/g, " ");
    if (target) return { target, superOptions: (superOptions ?? "").split(",").filter(Boolean) };
  }
  return undefined;
}

/**
 * The remount's options: the superblock's own, which the remount would otherwise clear
 * (cgroup2 takes its flags from the remount's options alone: `nsdelegate` and the memory
 * options systemd sets must be kept), plus the option.
 */
export function remountOptions(m: Cgroup2Mount): string {
  return ["remount", ...m.superOptions.filter((o) => o !== "rw" && o !== "ro"), OPTION].join(",");
}

export type FavorResult = "set" | "already" | "no-cgroup2" | "failed";

/**
 * Sets the option on the host's cgroup2 hierarchy. Best effort: an older kernel refuses the
 * option, a container without the host's privileges cannot remount; either leaves things as
 * they were (the remount fails whole) and sandboxes start as before, ~9 ms slower.
 */
export async function favorCgroupMigrations(logger: Logger, signal?: AbortSignal): Promise<FavorResult> {
  const m = cgroup2Mount(await readFile("/proc/self/mountinfo", "utf8").catch(() => ""));
  if (!m) {
    logger.info("no cgroup2 mount: cgroup migrations stay as the kernel has them");
    return "no-cgroup2";
  }
  if (m.superOptions.includes(OPTION)) return "already";
  const r = await exec("mount", ["-o", remountOptions(m), m.target], { timeoutMs: 10_000, signal, allowFailure: true });
  const after = cgroup2Mount(await readFile("/proc/self/mountinfo", "utf8").catch(() => ""));
  const lost = m.superOptions.filter((o) => !after?.superOptions.includes(o));
  if (r.exitCode !== 0 || !after?.superOptions.includes(OPTION)) {
    logger.warn({ target: m.target, err: r.stderr.trim().slice(-300) }, `could not set ${OPTION} on the cgroup2 mount: each sandbox start and restore waits ~9 ms more`);
    return "failed";
  }
  if (lost.length) logger.error({ target: m.target, lost }, `setting ${OPTION} dropped cgroup2 mount options`);
  logger.info({ target: m.target }, `cgroup2 mounted with ${OPTION}: fast cgroup migrations`);
  return "set";
}
