import { randomBytes, randomUUID } from "node:crypto";

declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

export type SandboxId = Brand<string, "SandboxId">;
export type TenantId = Brand<string, "TenantId">;
export type NodeId = Brand<string, "NodeId">;
export type OperationId = Brand<string, "OperationId">;
export type ExecutionId = Brand<string, "ExecutionId">;

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** `[a-z0-9]{n}`: E2B-style ids (no `-` or `.`, safe in host names and file names). */
export function randomId(n = 20): string {
  const bytes = randomBytes(n * 2);
  let out = "";
  for (let i = 0; out.length < n && i < bytes.length; i++) {
    const b = bytes[i]!;
    // Reject the top of the byte range so every character is equally likely.
    if (b < 252) out += ALPHABET[b % 36];
  }
  return out.length === n ? out : randomId(n);
}

export const newSandboxId = () => randomId(20) as SandboxId;
export const newOperationId = () => `op_${randomId(20)}` as OperationId;
export const newExecutionId = () => `ex_${randomId(16)}` as ExecutionId;
export const newTenantId = () => `tn_${randomId(16)}` as TenantId;
export const newNodeId = () => randomUUID() as NodeId;
export const newSecret = (prefix: string) => `${prefix}_${randomBytes(24).toString("base64url")}`;

export const isSandboxId = (s: string): s is SandboxId => /^[a-z0-9]{20}$/.test(s);
