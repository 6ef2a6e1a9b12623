/**
 * What the API stores in an operation's `request` (and `target`) for each kind: the wire
 * between admission (src/api/native) and the handlers. The request is what idempotency
 * hashes, so it holds exactly the caller's intent (never ids the server picked); ids
 * chosen at admission travel in the target (`sandboxes/<id>[/commands/<cid>]`).
 * Validated again when a handler reads it, so an unreadable row fails clearly.
 */
import { z } from "zod";
import { SpaceError } from "../../core/errors.ts";
import { CreateSandboxBody, RunCommandBody } from "../../api/native/schemas.ts";

export const SandboxCreateRequest = CreateSandboxBody;
export const SandboxRequest = z.object({ sandbox_id: z.string() });
export const CommandRunRequest = RunCommandBody.extend({ sandbox_id: z.string() });
export const CommandCancelRequest = z.object({ sandbox_id: z.string(), command_id: z.string(), signal: z.enum(["SIGTERM", "SIGKILL"]) });

export function readRequest<T>(schema: z.ZodType<T>, request: unknown, kind: string): T {
  const r = schema.safeParse(request);
  if (!r.success) throw new SpaceError("internal", `operation ${kind} has an unreadable request: ${r.error.message.slice(0, 200)}`);
  return r.data;
}

export const sandboxTarget = (id: string) => `sandboxes/${id}`;
export const commandTarget = (sandboxId: string, commandId: string) => `sandboxes/${sandboxId}/commands/${commandId}`;

/** `sandboxes/<id>[/commands/<cid>]` → its ids. */
export function parseTarget(target: string | null): { sandboxId: string; commandId?: string } {
  const m = /^sandboxes\/([^/]+)(?:\/commands\/([^/]+))?$/.exec(target ?? "");
  if (!m) throw new SpaceError("internal", `operation target ${JSON.stringify(target)} is not sandboxes/<id>[/commands/<cid>]`);
  return m[2] ? { sandboxId: m[1]!, commandId: m[2] } : { sandboxId: m[1]! };
}
