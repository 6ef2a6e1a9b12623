/** A pass-through stream that counts and sha256-hashes the bytes flowing through it. */
import { createHash } from "node:crypto";
import { Transform } from "node:stream";

export interface DigestMeter {
  stream: Transform;
  /** Size and hex sha256 of what has passed; call once the pipeline has finished. */
  result(): { sizeBytes: number; sha256: string };
}

export function digestMeter(): DigestMeter {
  const hash = createHash("sha256");
  let sizeBytes = 0;
  const stream = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      sizeBytes += chunk.length;
      cb(null, chunk);
    },
  });
  return { stream, result: () => ({ sizeBytes, sha256: hash.digest("hex") }) };
}
