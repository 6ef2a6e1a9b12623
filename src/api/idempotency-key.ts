/**
 * The `Idempotency-Key` request header, read the same way by both APIs that honour it:
 * ECW create (the key derives the sandbox id) and every Native mutation (the key names
 * the operation to replay).
 */
import type { FastifyRequest } from "fastify";
import { SpaceError } from "../core/errors.ts";

export const IDEMPOTENCY_HEADER = "idempotency-key";

/** The key, or null when absent; a key of 0 or over 255 characters is a 400 naming the header. */
export function idempotencyKey(req: FastifyRequest): string | null {
  const raw = req.headers[IDEMPOTENCY_HEADER];
  if (raw === undefined) return null;
  const key = Array.isArray(raw) ? raw[0] : raw;
  if (!key || key.length > 255) {
    throw new SpaceError("invalid_argument", `Idempotency-Key must be 1 to 255 characters, got ${key?.length ?? 0}`, { details: { field: "Idempotency-Key" } });
  }
  return key;
}
