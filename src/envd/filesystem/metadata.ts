/**
 * File metadata (`POST /files` `X-Metadata-*` headers, EntryInfo.metadata), kept as E2B's
 * envd keeps it: one `user.e2b.<key>` extended attribute per key on the file itself. So it
 * follows the file through renames, snapshots and `cp -a`, and what a program in the
 * sandbox sets (`setfattr -n user.e2b.k -v v f`) is metadata too. An upload replaces the
 * whole set (no headers clears it: O_TRUNC keeps xattrs). Paths follow symlinks, as E2B's.
 *
 * Node has no xattr API: native/xattr.c, built as xattr.node beside the bundle. Without the
 * addon, or on a filesystem without user xattrs (proc, sysfs), no metadata is kept, as
 * E2B's envd does on such filesystems: reads give none and the upload still succeeds.
 */
import { SpaceError } from "../../core/errors.ts";
import { loadAddon, type Log } from "../native-addon.ts";

export const METADATA_XATTR_PREFIX = "user.e2b.";
/** Linux caps an xattr name (prefix included) at 255 bytes. */
export const MAX_METADATA_KEY_BYTES = 255 - METADATA_XATTR_PREFIX.length;
/** ext4 keeps all of an inode's xattrs in one 4 KiB block; E2B's envd checks this budget. */
export const MAX_METADATA_TOTAL_BYTES = 4096;

export type Metadata = Record<string, string>;

/** The addon's surface (native/xattr.c). */
export interface Xattr {
  list(path: string): string[];
  get(path: string, name: string): Buffer | null;
  set(path: string, name: string, value: Buffer): void;
  remove(path: string, name: string): void;
}

/** `dir`: the bundle's directory (or src/envd in development, beside dist/envd). */
export function loadXattr(dir: string, log: Log): Xattr | undefined {
  const addon = loadAddon<Xattr>(dir, "xattr", log);
  if (!addon) log("no xattr addon: file metadata is not kept");
  return addon;
}

const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/** E2B's rules for a metadata set; the message names the offending header. */
export function validateMetadata(metadata: Metadata): void {
  let total = 0;
  for (const [k, v] of Object.entries(metadata)) {
    if (!k) throw new SpaceError("invalid_argument", "metadata key must not be empty");
    if (Buffer.byteLength(k) > MAX_METADATA_KEY_BYTES) {
      throw new SpaceError("invalid_argument", `metadata key ${JSON.stringify(k)} exceeds ${MAX_METADATA_KEY_BYTES} bytes`);
    }
    if (!PRINTABLE_ASCII.test(k))
      throw new SpaceError("invalid_argument", `metadata key ${JSON.stringify(k)} must be printable US-ASCII`);
    if (!PRINTABLE_ASCII.test(v)) {
      throw new SpaceError("invalid_argument", `X-Metadata-${k}: the value must be printable US-ASCII`);
    }
    total += METADATA_XATTR_PREFIX.length + k.length + v.length;
  }
  if (total > MAX_METADATA_TOTAL_BYTES) {
    throw new SpaceError("invalid_argument", `total metadata size ${total} exceeds ${MAX_METADATA_TOTAL_BYTES} bytes`);
  }
}

function unsupported(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException).code;
  return code === "ENOTSUP" || code === "EOPNOTSUPP";
}

export class FileMetadata {
  private warnedUnsupported = false;
  constructor(
    private readonly xattr: Xattr | undefined,
    private readonly log: Log,
  ) {}

  /** The file's metadata, or undefined when it has none (or it cannot be read). */
  read(path: string): Metadata | undefined {
    if (!this.xattr) return undefined;
    let names: string[];
    try {
      names = this.xattr.list(path);
    } catch {
      return undefined; // gone, dangling link, or no xattrs on this filesystem
    }
    let out: Metadata | undefined;
    const utf8 = new TextDecoder("utf-8", { fatal: true });
    for (const name of names) {
      if (!name.startsWith(METADATA_XATTR_PREFIX) || name.length === METADATA_XATTR_PREFIX.length) continue;
      let value: Buffer | null;
      try {
        value = this.xattr.get(path, name);
      } catch {
        continue;
      }
      if (value === null) continue;
      // Set inside the sandbox, a value may be any bytes; EntryInfo.metadata is a string
      // map that must be valid UTF-8, so such an entry is skipped (as E2B's envd does).
      try {
        (out ??= {})[name.slice(METADATA_XATTR_PREFIX.length)] = utf8.decode(value);
      } catch {
        continue;
      }
    }
    return out;
  }

  /**
   * Replaces the file's metadata with `metadata` (validated by the caller): keys not in it
   * are removed. A filesystem without user xattrs keeps none (logged once).
   */
  write(path: string, metadata: Metadata): void {
    if (!this.xattr) return;
    try {
      for (const name of this.xattr.list(path)) {
        if (name.startsWith(METADATA_XATTR_PREFIX) && !Object.hasOwn(metadata, name.slice(METADATA_XATTR_PREFIX.length))) {
          this.xattr.remove(path, name);
        }
      }
      for (const [k, v] of Object.entries(metadata)) this.xattr.set(path, METADATA_XATTR_PREFIX + k, Buffer.from(v));
    } catch (e: unknown) {
      if (!unsupported(e)) throw Object.assign(e as Error, { path });
      if (!this.warnedUnsupported) this.log("filesystem without user xattrs: file metadata not kept", { path });
      this.warnedUnsupported = true;
    }
  }
}
