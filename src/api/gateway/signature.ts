/**
 * envd signed file URLs (e2b-wire.md §3): `"v1_" + base64(sha256("<path>:<op>:<user>:<token>[:<exp>]"))`
 * without trailing `=`. The SDK builds those URLs from sandboxUrl with no sandbox id, so
 * the gateway finds the sandbox whose token produced the signature. The SDK interpolates
 * an absent user as the string "undefined".
 */
import { createHash, timingSafeEqual } from "node:crypto";

export function fileSignature(path: string, op: "read" | "write", user: string, token: string, expiration?: string): string {
  const raw = expiration ? `${path}:${op}:${user}:${token}:${expiration}` : `${path}:${op}:${user}:${token}`;
  return "v1_" + createHash("sha256").update(raw).digest("base64").replace(/=+$/, "");
}

/** True when `signature` in `query` was made with `token` for this method. */
export function signatureMatches(method: string, query: URLSearchParams, token: string): boolean {
  const sig = query.get("signature");
  if (!sig) return false;
  const op = method === "GET" || method === "HEAD" ? "read" : "write";
  const path = query.get("path") ?? "";
  const exp = query.get("signature_expiration") ?? undefined;
  const username = query.get("username");
  const users = username !== null ? [username] : ["undefined", "", "user"];
  const got = Buffer.from(sig);
  return users.some((u) => {
    const want = Buffer.from(fileSignature(path, op, u, token, exp));
    return want.length === got.length && timingSafeEqual(want, got);
  });
}
