/**
 * The size limits of what a caller may send, in one place (docs/behaviours.md §G).
 * E2B documents only the sandbox lifetime (24 h on its Pro tier); the rest are SPACE's
 * choices, sized so a list page stays small and an exec can never fail with E2BIG: Linux
 * refuses one argv/env string over 128 KiB (MAX_ARG_STRLEN) and argv + env together over
 * a quarter of the stack limit (2 MiB with the usual 8 MiB), so sandbox env + command env
 * + args stay below 1.5 MiB. Bytes are UTF-8 bytes.
 *
 * Every text that reaches the store must also be storable: Postgres refuses NUL in text
 * and jsonb, and unpaired UTF-16 surrogates in jsonb (`storableText`).
 */
import { z } from "zod";

export const LIMITS = {
  /** Seconds of lifetime from now: create, timeout, connect, fork (E2B: at most 24 h). */
  timeoutSec: { min: 1, max: 24 * 60 * 60 },
  metadata: { maxEntries: 64, maxKeyBytes: 256, maxValueBytes: 4096, maxTotalBytes: 16 * 1024 },
  /** A sandbox's env vars (sent to every process), and a command's own. */
  envVars: { maxEntries: 256, maxKeyBytes: 256, maxValueBytes: 32 * 1024, maxTotalBytes: 256 * 1024 },
  /** A Native command: its argv in total. */
  command: { maxArgsBytes: 1024 * 1024 },
} as const;

export const utf8Bytes = (s: string): number => Buffer.byteLength(s, "utf8");

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `s` cannot be stored as text, or undefined when it can. */
export function unstorable(s: string): string | undefined {
  if (s.includes("\u0000")) return "must not contain NUL bytes (\\u0000)";
  if (LONE_SURROGATE.test(s)) return "must not contain unpaired UTF-16 surrogates";
  return undefined;
}

interface MapLimits {
  maxEntries: number;
  maxKeyBytes: number;
  maxValueBytes: number;
  maxTotalBytes: number;
}

/**
 * A string → string map within `limits` (`what` names it in messages): too many entries,
 * a key or value too long, or too many bytes in total is an issue at the offending path.
 */
export function boundedStringMap(what: string, limits: MapLimits, key: z.ZodString = z.string()) {
  return z.record(key, z.string()).superRefine((m, ctx) => {
    const entries = Object.entries(m);
    if (entries.length > limits.maxEntries) {
      ctx.addIssue({ code: "custom", message: `${what} may have at most ${limits.maxEntries} entries (got ${entries.length})` });
    }
    let total = 0;
    for (const [k, v] of entries) {
      const kb = utf8Bytes(k);
      const vb = utf8Bytes(v);
      total += kb + vb;
      if (kb > limits.maxKeyBytes) ctx.addIssue({ code: "custom", message: `${what} key ${JSON.stringify(k.slice(0, 40))}… is ${kb} bytes; at most ${limits.maxKeyBytes}` });
      if (vb > limits.maxValueBytes) ctx.addIssue({ code: "custom", path: [k], message: `${what} value is ${vb} bytes; at most ${limits.maxValueBytes}` });
    }
    if (total > limits.maxTotalBytes) ctx.addIssue({ code: "custom", message: `${what} holds ${total} bytes of keys and values; at most ${limits.maxTotalBytes} bytes` });
  });
}

/** A lifetime in seconds, within LIMITS.timeoutSec. */
export const timeoutSeconds = (field: string) =>
  z
    .number()
    .int(`${field} must be an integer number of seconds`)
    .min(LIMITS.timeoutSec.min, `${field} must be at least ${LIMITS.timeoutSec.min} second`)
    .max(LIMITS.timeoutSec.max, `${field} must be at most ${LIMITS.timeoutSec.max} seconds (24 h)`);
