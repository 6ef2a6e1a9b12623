/**
 * EntryInfo as E2B's envd builds it: lstat for name, size, owner, times and a Go-style
 * permissions string (`-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`); a symlink reports its
 * target's type and permission bits with `symlinkTarget` = the resolved path (a dangling
 * one stays a symlink, target as written: E2B would answer an unknown type, which the
 * SDKs drop from listings). Directories report at least one 4096-byte block, as on ext4
 * (E2B's rootfs): btrfs says 0 for an empty directory. Metadata: `metadata.ts`.
 */
import { lstat, realpath, readlink, stat } from "node:fs/promises";
import type { Stats } from "node:fs";
import { basename } from "node:path";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { FileType, type EntryInfoSchema } from "../../gen/filesystem/filesystem_pb.ts";
import type { Envd } from "../context.ts";

export type EntryInit = MessageInitShape<typeof EntryInfoSchema>;

export function permissionsString(st: Stats): string {
  let t = "-";
  if (st.isDirectory()) t = "d";
  else if (st.isSymbolicLink()) t = "L";
  else if (st.isCharacterDevice()) t = "Dc";
  else if (st.isBlockDevice()) t = "D";
  else if (st.isFIFO()) t = "p";
  else if (st.isSocket()) t = "S";
  const m = st.mode;
  let extra = "";
  if (m & 0o4000) extra += "u";
  if (m & 0o2000) extra += "g";
  if (m & 0o1000) extra += "t";
  const rwx = "rwxrwxrwx";
  let bits = "";
  for (let i = 0; i < 9; i++) bits += m & (1 << (8 - i)) ? rwx[i] : "-";
  return (t === "-" && extra ? "" : t === "-" ? "-" : t) + extra + bits;
}

export function fileType(st: Stats): FileType {
  if (st.isSymbolicLink()) return FileType.SYMLINK;
  if (st.isDirectory()) return FileType.DIRECTORY;
  return FileType.FILE;
}

/** ext4's directory size: whole blocks, at least one. */
const DIR_BLOCK = 4096;

function sizeOf(st: Stats): bigint {
  if (!st.isDirectory()) return BigInt(st.size);
  return BigInt(Math.max(1, Math.ceil(st.size / DIR_BLOCK)) * DIR_BLOCK);
}

/** A symlink's resolved target and what it points at (undefined: dangling). */
export interface LinkTarget {
  path: string;
  st: Stats | undefined;
}

export function entryFromStats(envd: Envd, path: string, st: Stats, link?: LinkTarget): EntryInit {
  const shown = link?.st ?? st;
  return {
    name: basename(path) || "/",
    type: fileType(shown),
    path,
    size: sizeOf(st),
    mode: shown.mode & 0o777,
    permissions: permissionsString(st),
    owner: envd.users.userName(st.uid),
    group: envd.users.groupName(st.gid),
    modifiedTime: timestampFromMs(Math.floor(st.mtimeMs)),
    symlinkTarget: link?.path,
    metadata: envd.metadata.read(path) ?? {},
  };
}

async function linkTarget(path: string): Promise<LinkTarget> {
  try {
    const target = await realpath(path);
    return { path: target, st: await stat(target) };
  } catch {
    return { path: await readlink(path).catch(() => ""), st: undefined };
  }
}

/** EntryInfo for `path` (lstat; a final symlink is described by its target). Throws fs errors. */
export async function entryInfo(envd: Envd, path: string): Promise<EntryInit> {
  const st = await lstat(path);
  return entryFromStats(envd, path, st, st.isSymbolicLink() ? await linkTarget(path) : undefined);
}
