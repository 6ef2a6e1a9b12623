/**
 * The `code-interpreter-v1` template (the one E2B's code-interpreter SDKs create by default):
 * `base` plus the pinned PyPI packages of code-interpreter/requirements.txt (ipykernel,
 * jupyter_client, matplotlib) and the server of code-interpreter/server.py, which its start
 * command runs on port 49999 in every sandbox; its ready command waits for the default
 * Python kernel. Built once per machine into the same tarball cache as `base` (named by the
 * digest of the recipe, the base recipe, the pins and the server), by the project's set-up
 * (scripts/setup/build-code-interpreter-template.ts), never by a node: a node imports the
 * tarball into its cache only when a sandbox first asks for the template (lazily: the
 * suite's many stacks never pay for it), and advertises it meanwhile when the tarball exists.
 *
 * pip runs in a chroot of the new root with the host's CA bundle (`--cert`), so a machine
 * behind a TLS-inspecting proxy (whose CA the host trusts) downloads with verification on;
 * the bundle is not left in the template.
 */
import { createHash, randomBytes } from "node:crypto";
import { copyFile, mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { exec } from "../../core/exec.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { treeSizeMib, type TemplateInfo } from "../disk/disks.ts";
import { baseRecipeDigest, ensureBaseTemplateTarball, type TemplateTarball } from "./base-template.ts";
import { Progress } from "./progress.ts";

export const CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1";

const SOURCES = join(import.meta.dirname, "code-interpreter");
const SERVER_DIR = "/opt/space/code-interpreter";

export const codeInterpreterRecipe = {
  /** Bump when the steps below change: it renames the cached tarball. */
  version: 1,
  port: 49999,
  startCmd: `exec python3 ${SERVER_DIR}/server.py`,
  readyCmd: "curl -sf http://127.0.0.1:49999/health",
  user: { uid: 1000, home: "/home/user" },
} as const;

/** What a sandbox of the template boots with (read by node/sandboxes/template-boot.ts). */
export type CodeInterpreterInfo = TemplateInfo & { startCmd: string; readyCmd: string };

export async function codeInterpreterDigest(): Promise<string> {
  const h = createHash("sha256").update(JSON.stringify(codeInterpreterRecipe)).update(baseRecipeDigest());
  for (const f of ["requirements.txt", "server.py"]) h.update(await readFile(join(SOURCES, f)));
  return h.digest("hex");
}

async function paths(cacheDir: string) {
  const stem = join(cacheDir, `${CODE_INTERPRETER_TEMPLATE}-${(await codeInterpreterDigest()).slice(0, 12)}`);
  return { stem, meta: `${stem}.json`, tar: `${stem}.tar`, lock: `${stem}.lock` };
}

/** The cached tarball of the current recipe, if this machine built it; never builds. */
export async function findCodeInterpreterTarball(cacheDir: string): Promise<TemplateTarball | undefined> {
  // A build without the recipe's sources beside it (a compiled bundle) offers no code interpreter.
  const p = await paths(cacheDir).catch(() => undefined);
  if (!p) return undefined;
  const meta = await readFile(p.meta, "utf8")
    .then((t) => ({ ...(JSON.parse(t) as TemplateTarball), tarPath: p.tar }))
    .catch(() => undefined);
  return meta && (await stat(p.tar).catch(() => undefined)) ? meta : undefined;
}

/** The template's node-cache metadata: the tarball's, with the start and ready commands. */
export function codeInterpreterBoot(): Pick<CodeInterpreterInfo, "startCmd" | "readyCmd"> {
  return { startCmd: codeInterpreterRecipe.startCmd, readyCmd: codeInterpreterRecipe.readyCmd };
}

/** Returns the cached tarball, building it (and `base` first, when missing) once per machine. */
export async function ensureCodeInterpreterTarball(o: {
  cacheDir: string;
  mirror: string;
  logger: Logger;
  signal: AbortSignal;
  /** CA bundle pip verifies PyPI with (default: the host's). */
  caBundle?: string;
  progress?: boolean;
}): Promise<TemplateTarball> {
  const found = await findCodeInterpreterTarball(o.cacheDir);
  if (found) return found;
  const p = await paths(o.cacheDir);
  await mkdir(o.cacheDir, { recursive: true });
  // One build per machine at a time (as base-template.ts): concurrent set-ups wait on the lock dir.
  const deadline = Date.now() + 30 * 60_000;
  for (;;) {
    try {
      await mkdir(p.lock);
      break;
    } catch {
      const meta = await findCodeInterpreterTarball(o.cacheDir);
      if (meta) return meta;
      const age = Date.now() - ((await stat(p.lock).catch(() => undefined))?.mtimeMs ?? 0);
      if (age > 30 * 60_000) await rm(p.lock, { recursive: true, force: true });
      if (Date.now() > deadline) throw new SpaceError("unavailable", `code interpreter template build lock ${p.lock} held too long`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  const base = await ensureBaseTemplateTarball({ cacheDir: o.cacheDir, mirror: o.mirror, logger: o.logger, signal: o.signal, progress: o.progress });
  const progress = o.progress === false ? undefined : new Progress(`${CODE_INTERPRETER_TEMPLATE} template`);
  const root = `${p.stem}.build-${randomBytes(4).toString("hex")}`;
  const long = { timeoutMs: 30 * 60_000, signal: o.signal };
  try {
    progress?.step(`unpack base (${base.tarPath})`);
    await mkdir(root);
    await exec("tar", ["--numeric-owner", "--xattrs", "--acls", "-xpf", base.tarPath, "-C", root], long);
    progress?.step("pip install the pinned packages (host CA bundle)");
    // Build-time only: the host's resolver and CA bundle, put back / removed before packing.
    const resolv = join(root, "etc/resolv.conf");
    const resolvBefore = await readFile(resolv).catch(() => undefined);
    await copyFile("/etc/resolv.conf", resolv);
    await copyFile(o.caBundle ?? "/etc/ssl/certs/ca-certificates.crt", join(root, "tmp/space-build-ca.crt"));
    await copyFile(join(SOURCES, "requirements.txt"), join(root, "tmp/space-requirements.txt"));
    const env = { PATH: "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", LC_ALL: "C.UTF-8", HOME: "/root" };
    await exec(
      "chroot",
      [root, "python3", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-warn-script-location", "--cert", "/tmp/space-build-ca.crt", "-r", "/tmp/space-requirements.txt"],
      { ...long, env },
    );
    await rm(join(root, "tmp/space-build-ca.crt"));
    await rm(join(root, "tmp/space-requirements.txt"));
    if (resolvBefore) await writeFile(resolv, resolvBefore);
    progress?.step("install the server, warm matplotlib's font cache");
    await mkdir(join(root, SERVER_DIR.slice(1)), { recursive: true });
    await copyFile(join(SOURCES, "server.py"), join(root, SERVER_DIR.slice(1), "server.py"));
    // The first plot would otherwise spend seconds building the font cache in every sandbox.
    const u = codeInterpreterRecipe.user;
    await exec("chroot", [`--userspec=${u.uid}:${u.uid}`, root, "python3", "-c", "import matplotlib.pyplot"], {
      timeoutMs: 300_000,
      signal: o.signal,
      env: { ...env, HOME: u.home },
    });
    progress?.step("measure and pack");
    const rootfsSizeMib = await treeSizeMib(root, o.signal);
    await exec("tar", ["--numeric-owner", "--xattrs", "--acls", "-C", root, "-cf", `${p.tar}.tmp`, "."], { timeoutMs: 10 * 60_000, signal: o.signal });
    await rename(`${p.tar}.tmp`, p.tar);
    const meta: TemplateTarball = {
      name: CODE_INTERPRETER_TEMPLATE,
      tarPath: p.tar,
      rootfsSizeMib,
      recipeSha256: await codeInterpreterDigest(),
      mirror: o.mirror,
      builtAt: new Date().toISOString(),
    };
    await writeFile(p.meta, JSON.stringify(meta, null, 2));
    progress?.done(`built (${rootfsSizeMib} MiB rootfs, cached at ${p.tar})`);
    return meta;
  } catch (e) {
    progress?.fail(e);
    throw e;
  } finally {
    await rm(root, { recursive: true, force: true }).catch(() => undefined);
    await rm(p.lock, { recursive: true, force: true });
  }
}
