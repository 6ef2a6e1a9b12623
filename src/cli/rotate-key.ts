/**
 * `space rotate-key`: re-wraps every stored data key from SPACE_ENCRYPTION_KEY_PREVIOUS to
 * SPACE_ENCRYPTION_KEY. Only the wrapped keys change (a few dozen bytes each); no snapshot
 * or template stream is re-encrypted. Where wrapped keys live:
 *   - the database: `snapshots.wrapped_key` (store/snapshots.ts), replaced only if unchanged;
 *   - the blob store: the JSON records beside encrypted streams — `parents/<uuid>.json`,
 *     `templates/streams/*.json` and the template build/alias manifests under `templates/`
 *     (a template's capture descriptor carries one too) — every `wrappedKey` field in them.
 * Idempotent: a key the new key already unwraps is left alone, so a run that stopped half
 * way is simply run again. A wrapped key neither key unwraps is counted and named, never
 * touched; the run then exits non-zero. Nodes unwrap with either key meanwhile
 * (SPACE_ENCRYPTION_KEY_PREVIOUS), so sandboxes keep restoring during the rotation.
 */
import { text } from "node:stream/consumers";
import type { BlobStore } from "../blob/blob-store.ts";
import { rewrapKey } from "../core/envelope.ts";
import { SpaceError } from "../core/errors.ts";
import type { Queryable } from "../store/db.ts";
import { listWrappedSnapshotKeys, replaceWrappedSnapshotKey } from "../store/snapshots.ts";

export interface RotationReport {
  /** Re-wrapped from the previous key to the current one. */
  rewrapped: number;
  /** Already under the current key. */
  current: number;
  /** Wrapped by neither key: where (`snapshot <id>` or `blob <key>`). */
  unknown: string[];
  /** Changed by someone else between read and write (run again). */
  raced: string[];
}

/** Blob prefixes whose JSON records may hold wrapped data keys. */
const RECORD_PREFIXES = ["parents/", "templates/"];

export async function rotateKeys(o: { db: Queryable; blob: BlobStore; from: Buffer; to: Buffer; signal?: AbortSignal }): Promise<RotationReport> {
  if (o.from.equals(o.to)) throw new SpaceError("invalid_argument", "SPACE_ENCRYPTION_KEY_PREVIOUS equals SPACE_ENCRYPTION_KEY: nothing to rotate");
  const report: RotationReport = { rewrapped: 0, current: 0, unknown: [], raced: [] };
  for (const s of await listWrappedSnapshotKeys(o.db)) {
    const r = rewrapKey(o.from, o.to, s.wrappedKey);
    if (r.kind === "current") report.current++;
    else if (r.kind === "unknown") report.unknown.push(`snapshot ${s.id}`);
    else if (await replaceWrappedSnapshotKey(o.db, s.id, s.wrappedKey, r.wrapped)) report.rewrapped++;
    else report.raced.push(`snapshot ${s.id}`);
  }
  for (const prefix of RECORD_PREFIXES) {
    for (const key of await o.blob.list(prefix, o.signal)) {
      if (!key.endsWith(".json")) continue;
      const before = await o.blob.head(key, o.signal);
      if (!before) continue;
      let doc: unknown;
      try {
        doc = JSON.parse(await text(await o.blob.get(key, o.signal)));
      } catch {
        continue; // not a record of ours (an operator's file): nothing to re-wrap
      }
      let rewrapped = 0;
      const visit = (v: unknown): unknown => {
        if (Array.isArray(v)) return v.map(visit);
        if (!v || typeof v !== "object") return v;
        const out: Record<string, unknown> = {};
        for (const [k, x] of Object.entries(v)) {
          if (k === "wrappedKey" && typeof x === "string") {
            const r = rewrapKey(o.from, o.to, x);
            if (r.kind === "current") report.current++;
            else if (r.kind === "unknown") report.unknown.push(`blob ${key}`);
            else {
              rewrapped++;
              out[k] = r.wrapped;
              continue;
            }
          }
          out[k] = visit(x);
        }
        return out;
      };
      const next = visit(doc);
      if (!rewrapped) continue;
      // Written back only if nobody replaced the record since it was read (a publish).
      const now = await o.blob.head(key, o.signal);
      if (now?.sha256 !== before.sha256) {
        report.raced.push(`blob ${key}`);
        continue;
      }
      await o.blob.put(key, Buffer.from(JSON.stringify(next)), o.signal);
      report.rewrapped += rewrapped;
    }
  }
  return report;
}
