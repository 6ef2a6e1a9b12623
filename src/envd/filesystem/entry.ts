/**
 * EntryInfo from lstat: permission bits, a Go-style permissions string
 * (`-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`), owner/group names, symlink target.
 */
import { lstat, realpath, readlink } from "node:fs/promises";
import { lstatSync, readlinkSync, realpathSync, type Stats } from "node:fs";
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

export function entryFromStats(envd: Envd, path: string, st: Stats, symlinkTarget?: string): EntryInit {
  return {
    name: basename(path) || "/",
    type: fileType(st),
    path,
    size: BigInt(st.size),
    mode: st.mode & 0o777,
    permissions: permissionsString(st),
    owner: envd.users.userName(st.uid),
    group: envd.users.groupName(st.gid),
    modifiedTime: timestampFromMs(Math.floor(st.mtimeMs)),
    symlinkTarget,
    metadata: envd.metadata.get(st) ?? {},
  };
}

/** EntryInfo for `path` (not following a final symlink). Throws fs errors. */
export async function entryInfo(envd: Envd, path: string): Promise<EntryInit> {
  const st = await lstat(path);
  let target: string | undefined;
  if (st.isSymbolicLink()) {
    target = await realpath(path).catch(async () => readlink(path).catch(() => ""));
  }
  return entryFromStats(envd, path, st, target);
}

/** entryInfo, synchronously (inside `Privileges.asUser`, which needs synchronous I/O). */
export function entryInfoSync(envd: Envd, path: string): EntryInit {
  const st = lstatSync(path);
  let target: string | undefined;
  if (st.isSymbolicLink()) {
    try {
      target = realpathSync(path);
    } catch {
      target = (() => {
        try {
          return readlinkSync(path);
        } catch {
          return "";
        }
      })();
    }
  }
  return entryFromStats(envd, path, st, target);
}
