/**
 * File operations on a build's rootfs from the host, confined to the rootfs: every path is
 * resolved component by component, and a symlink inside the image (absolute or relative)
 * is followed *within* the rootfs, never into the host (an image with `/app -> /etc` must
 * not make a COPY write the host's /etc).
 */
import { chmod, lchown, lstat, mkdir, readdir, readFile, readlink, copyFile, symlink, writeFile, appendFile } from "node:fs/promises";
import { join } from "node:path";
import { invalid } from "../../core/errors.ts";

const MAX_LINKS = 40;

/** Host path of `path` inside `root`, symlinks resolved within root. The last component may be missing. */
export async function resolveInRoot(root: string, path: string, opts: { followLast?: boolean } = {}): Promise<string> {
  const followLast = opts.followLast ?? true;
  let parts = path.split("/").filter((p) => p && p !== ".");
  const out: string[] = [];
  let links = 0;
  while (parts.length) {
    const p = parts.shift()!;
    if (p === "..") {
      out.pop();
      continue;
    }
    const host = join(root, ...out, p);
    const st = await lstat(host).catch(() => undefined);
    if (st?.isSymbolicLink() && (parts.length > 0 || followLast)) {
      if (++links > MAX_LINKS) throw invalid(`too many symlinks resolving ${path} in the image`);
      const target = await readlink(host);
      if (target.startsWith("/")) out.length = 0;
      parts = [...target.split("/").filter((x) => x && x !== "."), ...parts];
      continue;
    }
    out.push(p);
  }
  return join(root, ...out);
}

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

export function parsePasswd(text: string): PasswdEntry[] {
  return text
    .split("\n")
    .map((l) => l.split(":"))
    .filter((f) => f.length >= 7 && f[0])
    .map((f) => ({ name: f[0]!, uid: Number(f[2]), gid: Number(f[3]), home: f[5] || "/" }));
}

/** A user of the image by name or numeric `uid[:gid]`. */
export async function lookupUser(root: string, user: string): Promise<PasswdEntry> {
  const passwd = parsePasswd(await readFile(await resolveInRoot(root, "/etc/passwd"), "utf8").catch(() => ""));
  const [name, group] = user.split(":");
  const byName = passwd.find((p) => p.name === name);
  if (byName) return { ...byName, gid: group !== undefined && /^\d+$/.test(group) ? Number(group) : byName.gid };
  if (name && /^\d+$/.test(name)) {
    const uid = Number(name);
    const known = passwd.find((p) => p.uid === uid);
    return { name, uid, gid: group !== undefined && /^\d+$/.test(group) ? Number(group) : (known?.gid ?? uid), home: known?.home ?? "/" };
  }
  if (name === "root") return { name: "root", uid: 0, gid: 0, home: "/root" };
  throw invalid(`user ${JSON.stringify(user)} does not exist in the image (/etc/passwd)`);
}

/**
 * Copies the host tree `src` (a file or a directory's contents) to `dest` in `root`.
 * Returns the host paths written (for chown/chmod).
 */
export async function copyIntoRoot(root: string, src: string, dest: string, srcIsDir: boolean): Promise<string[]> {
  const written: string[] = [];
  const copyEntry = async (from: string, toInRoot: string) => {
    const st = await lstat(from);
    if (st.isDirectory()) {
      const to = await resolveInRoot(root, toInRoot);
      await mkdir(to, { recursive: true });
      await chmod(to, st.mode & 0o7777);
      written.push(to);
      for (const name of await readdir(from)) await copyEntry(join(from, name), `${toInRoot}/${name}`);
      return;
    }
    const parent = toInRoot.replace(/\/[^/]*$/, "") || "/";
    const base = toInRoot.slice(parent.length).replace(/^\//, "");
    const dir = await resolveInRoot(root, parent);
    await mkdir(dir, { recursive: true });
    const to = join(dir, base);
    // Replace what is there (never write through a symlink at the target).
    const existing = await lstat(to).catch(() => undefined);
    if (existing?.isDirectory()) throw invalid(`COPY: ${toInRoot} is a directory in the image`);
    if (existing) await import("node:fs/promises").then((f) => f.rm(to, { force: true }));
    if (st.isSymbolicLink()) await symlink(await readlink(from), to);
    else if (st.isFile()) {
      await copyFile(from, to);
      await chmod(to, st.mode & 0o7777);
    } else return; // devices, fifos: not copied
    written.push(to);
  };
  if (srcIsDir) {
    const to = await resolveInRoot(root, dest);
    await mkdir(to, { recursive: true });
    for (const name of await readdir(src)) await copyEntry(join(src, name), `${dest.replace(/\/+$/, "")}/${name}`);
  } else {
    await copyEntry(src, dest);
  }
  return written;
}

export async function chownAll(paths: string[], uid: number, gid: number): Promise<void> {
  for (const p of paths) await lchown(p, uid, gid);
}

export async function chmodFiles(paths: string[], mode: number): Promise<void> {
  for (const p of paths) {
    const st = await lstat(p);
    if (!st.isSymbolicLink()) await chmod(p, mode);
  }
}

/**
 * What SPACE needs in every template: the user `user` (uid 1000, home /home/user) envd
 * runs commands as, and the mount points of the node-provided envd and Node.js runtime.
 * Edits the files directly, so it works in images without useradd (busybox, distroless).
 */
export async function ensureSandboxUser(root: string): Promise<void> {
  const passwdPath = await resolveInRoot(root, "/etc/passwd");
  await mkdir(await resolveInRoot(root, "/etc"), { recursive: true });
  const passwd = await readFile(passwdPath, "utf8").catch(() => "");
  const entries = parsePasswd(passwd);
  if (!entries.some((e) => e.name === "root")) await appendFile(passwdPath, `${passwd && !passwd.endsWith("\n") ? "\n" : ""}root:x:0:0:root:/root:/bin/sh\n`);
  if (!entries.some((e) => e.name === "user")) {
    const shell = (await lstat(await resolveInRoot(root, "/bin/bash")).catch(() => undefined)) ? "/bin/bash" : "/bin/sh";
    const cur = await readFile(passwdPath, "utf8");
    await writeFile(passwdPath, `${cur}${cur.endsWith("\n") || !cur ? "" : "\n"}user:x:1000:1000::/home/user:${shell}\n`);
    const groupPath = await resolveInRoot(root, "/etc/group");
    const group = await readFile(groupPath, "utf8").catch(() => "");
    if (!/^user:/m.test(group)) await writeFile(groupPath, `${group}${group.endsWith("\n") || !group ? "" : "\n"}user:x:1000:\n`);
  }
  const home = await resolveInRoot(root, "/home/user");
  if (!(await lstat(home).catch(() => undefined))) {
    await mkdir(home, { recursive: true });
    await lchown(home, 1000, 1000);
  }
  await mkdir(await resolveInRoot(root, "/opt/space/envd"), { recursive: true });
  await mkdir(await resolveInRoot(root, "/opt/space/bin"), { recursive: true });
  const nodeMount = await resolveInRoot(root, "/opt/space/bin/node");
  if (!(await lstat(nodeMount).catch(() => undefined))) await writeFile(nodeMount, "");
  for (const d of ["/tmp", "/root", "/etc", "/proc", "/sys", "/dev", "/run"]) {
    const p = await resolveInRoot(root, d);
    if (!(await lstat(p).catch(() => undefined))) await mkdir(p, { recursive: true, mode: d === "/tmp" ? 0o1777 : 0o755 });
  }
  await chmod(await resolveInRoot(root, "/tmp"), 0o1777);
}
