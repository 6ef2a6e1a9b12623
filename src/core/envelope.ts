/**
 * Envelope encryption of snapshot parts at rest: AES-256-GCM with a random data key per
 * snapshot; the data key is stored only wrapped (AES-256-GCM) by the cluster key
 * (SPACE_ENCRYPTION_KEY, 64 hex). Stream format of an encrypted part:
 *
 *   "SPE1" | iv (12 bytes) | ciphertext | tag (16 bytes)
 *
 * Decryption streams the plaintext out but only reports success once the tag verifies;
 * callers must treat what they consumed as untrusted until then (restore writes to a
 * scratch place and discards it on failure).
 */
import { createCipheriv, createDecipheriv, randomBytes, type DecipherGCM } from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";
import { SpaceError } from "./errors.ts";

const MAGIC = Buffer.from("SPE1");
const IV = 12;
const TAG = 16;

export function parseClusterKey(hex: string): Buffer | undefined {
  if (!hex) return undefined;
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new SpaceError("invalid_argument", "SPACE_ENCRYPTION_KEY must be 64 hex characters");
  return Buffer.from(hex, "hex");
}

export function newDataKey(): Buffer {
  return randomBytes(32);
}

/** base64(iv | ct | tag) of the data key under the cluster key. */
export function wrapKey(clusterKey: Buffer, dataKey: Buffer): string {
  const iv = randomBytes(IV);
  const c = createCipheriv("aes-256-gcm", clusterKey, iv);
  c.setAAD(Buffer.from("space-snapshot-data-key"));
  const ct = Buffer.concat([c.update(dataKey), c.final()]);
  return Buffer.concat([iv, ct, c.getAuthTag()]).toString("base64");
}

/**
 * The data key, unwrapped by the cluster key, or by `previous` (SPACE_ENCRYPTION_KEY_PREVIOUS)
 * when the cluster key does not fit: a rotation's `space rotate-key` has not re-wrapped it yet.
 */
export function unwrapKey(clusterKey: Buffer, wrapped: string, previous?: Buffer): Buffer {
  const b = Buffer.from(wrapped, "base64");
  if (b.length !== IV + 32 + TAG) throw new SpaceError("invalid_argument", "wrapped data key has the wrong length");
  const key = tryUnwrap(clusterKey, b) ?? (previous ? tryUnwrap(previous, b) : undefined);
  if (!key) throw new SpaceError("failed_precondition", "cannot unwrap the snapshot data key: wrong cluster key (SPACE_ENCRYPTION_KEY) or corrupted key");
  return key;
}

function tryUnwrap(clusterKey: Buffer, b: Buffer): Buffer | undefined {
  const d = createDecipheriv("aes-256-gcm", clusterKey, b.subarray(0, IV));
  d.setAAD(Buffer.from("space-snapshot-data-key"));
  d.setAuthTag(b.subarray(IV + 32));
  try {
    return Buffer.concat([d.update(b.subarray(IV, IV + 32)), d.final()]);
  } catch {
    return undefined;
  }
}

/**
 * A wrapped data key under `to`: `current` when `to` already wraps it, `rewrapped` (with the
 * new value) when `from` did, `unknown` when neither key fits it (a third key, or damage).
 */
export function rewrapKey(from: Buffer, to: Buffer, wrapped: string): { kind: "current" } | { kind: "rewrapped"; wrapped: string } | { kind: "unknown" } {
  const b = Buffer.from(wrapped, "base64");
  if (b.length !== IV + 32 + TAG) return { kind: "unknown" };
  if (tryUnwrap(to, b)) return { kind: "current" };
  const key = tryUnwrap(from, b);
  return key ? { kind: "rewrapped", wrapped: wrapKey(to, key) } : { kind: "unknown" };
}

/** Plaintext in, "SPE1"|iv|ct|tag out. `aad` binds the stream to its place (e.g. the part's key). */
export function encryptStream(dataKey: Buffer, aad: string): Transform {
  const iv = randomBytes(IV);
  const c = createCipheriv("aes-256-gcm", dataKey, iv);
  c.setAAD(Buffer.from(aad));
  let started = false;
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      if (!started) {
        started = true;
        this.push(Buffer.concat([MAGIC, iv]));
      }
      cb(null, c.update(chunk));
    },
    flush(cb: TransformCallback) {
      if (!started) this.push(Buffer.concat([MAGIC, iv]));
      const last = c.final();
      if (last.length) this.push(last);
      this.push(c.getAuthTag());
      cb();
    },
  });
}

/** Inverse of encryptStream; errors (the stream fails) when the tag does not verify. */
export function decryptStream(dataKey: Buffer, aad: string): Transform {
  let head = Buffer.alloc(0);
  let d: DecipherGCM | undefined;
  // The last TAG bytes seen so far are held back: they may be the tag.
  let tail = Buffer.alloc(0);
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      if (!d) {
        head = Buffer.concat([head, chunk]);
        if (head.length < MAGIC.length + IV) return cb();
        if (!head.subarray(0, 4).equals(MAGIC)) return cb(new SpaceError("failed_precondition", "snapshot part is not encrypted with this format (bad magic)"));
        d = createDecipheriv("aes-256-gcm", dataKey, head.subarray(4, 4 + IV));
        d.setAAD(Buffer.from(aad));
        chunk = head.subarray(4 + IV);
        head = Buffer.alloc(0);
      }
      const all = Buffer.concat([tail, chunk]);
      if (all.length <= TAG) {
        tail = all;
        return cb();
      }
      tail = all.subarray(all.length - TAG);
      cb(null, d.update(all.subarray(0, all.length - TAG)));
    },
    flush(cb: TransformCallback) {
      if (!d || tail.length !== TAG) return cb(new SpaceError("failed_precondition", "encrypted snapshot part is truncated"));
      d.setAuthTag(tail);
      try {
        const last = d.final();
        if (last.length) this.push(last);
        cb();
      } catch (e) {
        cb(new SpaceError("failed_precondition", "encrypted snapshot part fails authentication (corrupted or tampered)", { cause: e }));
      }
    },
  });
}
