/**
 * Access token, signed file URLs and user selection (e2b-wire.md §3).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { SpaceError } from "../core/errors.ts";

export const UNAUTHORIZED_MESSAGE = "unauthorized access, please provide a valid access token or method signing if supported";

export function tokenMatches(expected: string | undefined, given: string | null | undefined): boolean {
  if (expected === undefined) return true;
  if (!given) return false;
  const a = Buffer.from(expected);
  const b = Buffer.from(given);
  return a.length === b.length && timingSafeEqual(a, b);
}

export type SignOp = "read" | "write";

/** `v1_` + base64(sha256("<path>:<op>:<user>:<token>[:<exp>]")) without padding. */
export function signature(path: string, op: SignOp, user: string, token: string, expiration?: number): string {
  const raw = `${path}:${op}:${user}:${token}${expiration === undefined ? "" : `:${expiration}`}`;
  return "v1_" + createHash("sha256").update(raw).digest("base64").replace(/=+$/, "");
}

/**
 * Checks a signed file URL. Throws `unauthenticated` with E2B's exact messages.
 * `expiration` is unix seconds.
 */
export function verifySignature(
  q: { path: string; op: SignOp; user: string; signature: string | null; expiration: string | null },
  token: string,
  nowMs = Date.now(),
): void {
  if (!q.signature) throw new SpaceError("unauthenticated", "missing signature query parameter");
  let exp: number | undefined;
  if (q.expiration) {
    exp = Number(q.expiration);
    if (!Number.isInteger(exp)) throw new SpaceError("unauthenticated", "invalid signature");
  }
  const want = Buffer.from(signature(q.path, q.op, q.user, token, exp));
  const got = Buffer.from(q.signature);
  if (want.length !== got.length || !timingSafeEqual(want, got)) throw new SpaceError("unauthenticated", "invalid signature");
  if (exp !== undefined && exp * 1000 < nowMs) throw new SpaceError("unauthenticated", "signature is already expired");
}

/** The user named by `Authorization: Basic base64("<user>:")`, or undefined. */
export function basicAuthUser(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^Basic\s+(.+)$/i.exec(header.trim());
  if (!m) return undefined;
  const decoded = Buffer.from(m[1]!, "base64").toString("utf8");
  const name = decoded.split(":")[0] ?? "";
  return name || undefined;
}
