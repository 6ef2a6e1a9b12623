/**
 * What the API stores in an operation's `request` for each kind: the wire between
 * admission (src/api/native) and the handlers. Validated again when a handler reads it,
 * so a row written by an older version fails clearly instead of half-running.
 */
import { z } from "zod";
import { SpaceError } from "../../core/errors.ts";
import { CreateSandboxBody } from "../../api/native/schemas.ts";

export const SandboxCreateRequest = z.object({ sandbox_id: z.string(), body: CreateSandboxBody });
export const SandboxRequest = z.object({ sandbox_id: z.string() });
export const CommandRunRequest = z.object({ sandbox_id: z.string(), command_id: z.string() });
export const CommandCancelRequest = z.object({ sandbox_id: z.string(), command_id: z.string(), signal: z.enum(["SIGTERM", "SIGKILL"]) });

export function readRequest<T>(schema: z.ZodType<T>, request: unknown, kind: string): T {
  const r = schema.safeParse(request);
  if (!r.success) throw new SpaceError("internal", `operation ${kind} has an unreadable request: ${r.error.message.slice(0, 200)}`);
  return r.data;
}
