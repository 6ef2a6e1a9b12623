/**
 * The `base` template: Debian bookworm (debootstrap minbase) from the machine's own apt
 * mirror with what E2B users expect of E2B's base (`python`/`python3` with a working
 * `pip install`, Node.js with npm, git, curl), and a user `user` (uid 1000, /home/user,
 * passwordless sudo). Built once per machine into a tarball cache (debootstrap takes a few
 * minutes); every node cache (reformatted each boot) imports the tarball in seconds.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { exec } from "../../core/exec.ts";
import { treeSizeMib } from "../disk/disks.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { Progress } from "./progress.ts";

export const BASE_TEMPLATE = "base";

export const baseRecipe = {
  /** Bump when the steps below change: it renames the cached tarball. */
  version: 4,
  suite: "bookworm",
  variant: "minbase",
  packages: ["bash", "coreutils", "python3", "python3-pip", "curl", "git", "procps", "sudo", "ca-certificates", "iproute2"],
  /**
   * Installed by apt inside the new root: debootstrap's own resolver cannot configure npm's
   * hundred node-* dependencies in one pass ("Failure while configuring base packages").
   */
  aptPackages: ["python-is-python3", "python3-venv", "nodejs", "npm"],
  user: { name: "user", uid: 1000, home: "/home/user" },
} as const;

export interface TemplateTarball {
  name: string;
  tarPath: string;
  /** Size of the unpacked rootfs. */
  rootfsSizeMib: number;
  recipeSha256: string;
  mirror: string;
  builtAt: string;
}

export function baseRecipeDigest(): string {
  return createHash("sha256").update(JSON.stringify(baseRecipe)).digest("hex");
}

/** Returns the cached tarball of the base template, building it first when missing. */
export async function ensureBaseTemplateTarball(o: {
  cacheDir: string;
  mirror: string;
  logger: Logger;
  signal: AbortSignal;
  progress?: boolean;
}): Promise<TemplateTarball> {
  const digest = baseRecipeDigest();
  const stem = join(o.cacheDir, `${BASE_TEMPLATE}-${digest.slice(0, 12)}`);
  const metaPath = `${stem}.json`;
  // The tarball is the one beside its metadata (the cache may have been copied from the machine cache).
  const cached = await readFile(metaPath, "utf8")
    .then((t) => ({ ...(JSON.parse(t) as TemplateTarball), tarPath: `${stem}.tar` }))
    .catch(() => undefined);
  if (cached && (await stat(cached.tarPath).catch(() => undefined))) return cached;

  await mkdir(o.cacheDir, { recursive: true });
  // One build per machine at a time: concurrent nodes wait on the lock dir.
  const lock = `${stem}.lock`;
  const lockDeadline = Date.now() + 20 * 60_000;
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch {
      const meta = await readFile(metaPath, "utf8").then((t) => JSON.parse(t) as TemplateTarball).catch(() => undefined);
      if (meta) return meta;
      const age = Date.now() - ((await stat(lock).catch(() => undefined))?.mtimeMs ?? 0);
      if (age > 20 * 60_000) await rm(lock, { recursive: true, force: true });
      if (Date.now() > lockDeadline) throw new SpaceError("unavailable", `base template build lock ${lock} held too long`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const progress = o.progress === false ? undefined : new Progress("base template");
  const root = `${stem}.build-${randomBytes(4).toString("hex")}`;
  try {
    const r = baseRecipe;
    progress?.step(`debootstrap ${r.suite} from ${o.mirror}`);
    o.logger.info({ mirror: o.mirror, root }, "building the base template (debootstrap, about a minute, once per machine)");
    await exec(
      "debootstrap",
      [`--variant=${r.variant}`, `--include=${r.packages.join(",")}`, r.suite, root, o.mirror],
      { timeoutMs: 30 * 60_000, signal: o.signal },
    );
    progress?.step(`apt-get install ${r.aptPackages.join(" ")}`);
    const apt = { timeoutMs: 30 * 60_000, signal: o.signal, env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", DEBIAN_FRONTEND: "noninteractive", LC_ALL: "C" } };
    await exec("chroot", [root, "apt-get", "update"], apt);
    await exec("chroot", [root, "apt-get", "install", "-y", "--no-install-recommends", ...r.aptPackages], apt);
    await exec("chroot", [root, "apt-get", "clean"], apt);
    progress?.step("configure user and sudo");
    await exec("chroot", [root, "useradd", "--create-home", "--home-dir", r.user.home, "--uid", String(r.user.uid), "--shell", "/bin/bash", "--user-group", r.user.name], {
      timeoutMs: 60_000,
      signal: o.signal,
    });
    await writeFile(join(root, "etc/sudoers.d/user"), `${r.user.name} ALL=(ALL:ALL) NOPASSWD: ALL\n`, { mode: 0o440 });
    // Every command is `bash -l -c …`, and Debian's /etc/profile runs `$(id -u)` (a fork and
    // an exec, ~2 ms of each command's start) for what bash already knows as EUID; other
    // shells, which have no EUID, still run `id -u`.
    const profile = join(root, "etc/profile");
    const text = await readFile(profile, "utf8");
    if (!text.includes('"$(id -u)"')) o.logger.warn({ profile }, "base template: /etc/profile has no $(id -u) to replace; login shells keep their cost");
    await writeFile(profile, text.replaceAll('"$(id -u)"', '"${EUID:-$(id -u)}"'));
    // Mount points of what the node binds in (envd and its Node.js runtime).
    await mkdir(join(root, "opt/space/bin"), { recursive: true });
    await mkdir(join(root, "opt/space/envd"), { recursive: true });
    await writeFile(join(root, "opt/space/bin/node"), "");
    await writeFile(join(root, "etc/hostname"), "sandbox\n");
    // PEP 668: bookworm marks its Python "externally managed", so a plain `pip install`
    // (what E2B users and `Template().pipInstall()` run) fails. A sandbox is a throwaway
    // machine of its own, as E2B's base image is: pip installs into the system Python.
    for (const d of (await readdir(join(root, "usr/lib"))).filter((d) => /^python3(\.\d+)?$/.test(d))) {
      await rm(join(root, "usr/lib", d, "EXTERNALLY-MANAGED"), { force: true });
    }
    await writeFile(join(root, "etc/pip.conf"), "[global]\nbreak-system-packages = true\n");
    await rm(join(root, "var/cache/apt/archives"), { recursive: true, force: true });
    await mkdir(join(root, "var/cache/apt/archives/partial"), { recursive: true });
    await rm(join(root, "var/lib/apt/lists"), { recursive: true, force: true });
    await mkdir(join(root, "var/lib/apt/lists/partial"), { recursive: true });
    progress?.step("measure and pack");
    const rootfsSizeMib = await treeSizeMib(root, o.signal);
    const tarPath = `${stem}.tar`;
    await exec("tar", ["--numeric-owner", "--xattrs", "--acls", "-C", root, "-cf", `${tarPath}.tmp`, "."], { timeoutMs: 10 * 60_000, signal: o.signal });
    await rename(`${tarPath}.tmp`, tarPath);
    const meta: TemplateTarball = { name: BASE_TEMPLATE, tarPath, rootfsSizeMib, recipeSha256: digest, mirror: o.mirror, builtAt: new Date().toISOString() };
    await writeFile(metaPath, JSON.stringify(meta, null, 2));
    progress?.done(`built (${rootfsSizeMib} MiB rootfs, cached at ${tarPath})`);
    return meta;
  } catch (e) {
    progress?.fail(e);
    throw e;
  } finally {
    await rm(root, { recursive: true, force: true }).catch(() => undefined);
    await rm(lock, { recursive: true, force: true });
  }
}
