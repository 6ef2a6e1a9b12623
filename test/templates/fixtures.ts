/**
 * Test images made on this machine (no registry): a small glibc rootfs assembled from the
 * host's own binaries and their libraries (enough for bash, coreutils and envd's Node.js
 * runtime), packed into an OCI image with umoci and into an oci-archive with skopeo.
 */
import { copyFile, mkdir, mkdtemp, readlink, realpath, rm, symlink, writeFile, lstat, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { exec } from "../../src/core/exec.ts";

const TOOLS = ["bash", "dash", "cat", "ls", "mkdir", "echo", "id", "env", "sleep", "touch", "chmod", "rm", "grep", "tar", "gzip", "test", "true", "false", "wc", "head", "sed", "stat", "uname", "whoami", "cp", "mv", "ln"];

async function which(tool: string): Promise<string | undefined> {
  for (const d of ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]) {
    const p = join(d, tool);
    if (await lstat(p).catch(() => undefined)) return realpath(p);
  }
  return undefined;
}

async function libsOf(bin: string): Promise<string[]> {
  const r = await exec("ldd", [bin], { allowFailure: true, timeoutMs: 10_000 });
  return [...r.stdout.matchAll(/(\/\S+\.so[^\s]*)/g)].map((m) => m[1]!);
}

/** A glibc userland of ~10-20 MiB in `root` (merged-/usr layout). */
export async function makeGlibcRootfs(root: string): Promise<void> {
  for (const d of ["usr/bin", "usr/lib/x86_64-linux-gnu", "lib64", "etc", "tmp", "root", "proc", "sys", "dev", "run", "var"]) await mkdir(join(root, d), { recursive: true });
  await chmod(join(root, "tmp"), 0o1777);
  await symlink("usr/bin", join(root, "bin"));
  await symlink("usr/bin", join(root, "sbin"));
  await symlink("usr/lib", join(root, "lib"));
  const libs = new Set<string>(await libsOf(await realpath(process.execPath)));
  for (const t of TOOLS) {
    const p = await which(t);
    if (!p) continue;
    await copyFile(p, join(root, "usr/bin", t));
    await chmod(join(root, "usr/bin", t), 0o755);
    for (const l of await libsOf(p)) libs.add(l);
  }
  await symlink("dash", join(root, "usr/bin/sh"));
  for (const l of libs) {
    const real = await realpath(l);
    const dest = l.startsWith("/lib64/") ? join(root, "lib64", basename(l)) : join(root, "usr/lib/x86_64-linux-gnu", basename(l));
    await copyFile(real, dest);
  }
  await writeFile(join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n");
  await writeFile(join(root, "etc/group"), "root:x:0:\n");
  await writeFile(join(root, "etc/removed-by-layer-2"), "should be whited out\n");
}

export interface OciFixture {
  dir: string;
  archive: string;
  cleanup(): Promise<void>;
}

/**
 * An oci-archive of two layers: the rootfs, then a layer that adds /etc/layer2 and
 * whites out /etc/removed-by-layer-2 (umoci insert --whiteout). Config: Env FIXTURE=oci.
 */
export async function makeOciArchive(): Promise<OciFixture> {
  const dir = await mkdtemp(join(tmpdir(), "space-oci-"));
  const rootfs = join(dir, "rootfs");
  await makeGlibcRootfs(rootfs);
  const layout = join(dir, "layout");
  const T = { timeoutMs: 120_000 };
  await exec("umoci", ["init", "--layout", layout], T);
  await exec("umoci", ["new", "--image", `${layout}:latest`], T);
  await exec("umoci", ["insert", "--image", `${layout}:latest`, rootfs, "/"], T);
  const l2 = join(dir, "layer2");
  await mkdir(l2);
  await writeFile(join(l2, "layer2"), "from layer 2\n");
  await exec("umoci", ["insert", "--image", `${layout}:latest`, l2, "/etc"], T);
  await exec("umoci", ["insert", "--image", `${layout}:latest`, "--whiteout", "/etc/removed-by-layer-2"], T);
  await exec("umoci", ["config", "--image", `${layout}:latest`, "--config.env", "FIXTURE=oci", "--config.env", "PATH=/usr/local/bin:/usr/bin:/bin"], T);
  const archive = join(dir, "image.tar");
  await exec("skopeo", ["--insecure-policy", "copy", "--quiet", `oci:${layout}:latest`, `oci-archive:${archive}`], T);
  await rm(rootfs, { recursive: true, force: true });
  return { dir, archive, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** A tar of `files` (relative path → content), as the e2b SDK uploads for COPY. */
export async function makeFilesTar(files: Record<string, string>): Promise<{ path: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), "space-files-"));
  const ctx = join(dir, "ctx");
  for (const [p, c] of Object.entries(files)) {
    await mkdir(dirname(join(ctx, p)), { recursive: true });
    await writeFile(join(ctx, p), c);
  }
  const path = join(dir, "files.tar.gz");
  await exec("tar", ["-czf", path, "-C", ctx, ...Object.keys(files)], { timeoutMs: 30_000 });
  return { path, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export { readlink };
