/**
 * Every Native (`/v1`) wire body, defined once: the routes validate with these, the
 * static types come from them, and `/v1/openapi.json` is generated from them. Objects
 * are strict, so an unknown field is refused with its name.
 */
import { z } from "zod";
import { NativeRule } from "../network/policy.ts";
import { ObservedDestination } from "../../contract/egress-policy.ts";

// ---------------------------------------------------------------- shared

export const Metadata = z.record(z.string().max(256), z.string().max(4096)).meta({ description: "string labels, filterable in lists" });
export const EnvVars = z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "an environment variable name"), z.string());

export const ErrorBody = z
  .object({
    code: z.number().int().meta({ description: "HTTP status" }),
    message: z.string(),
    reason: z.string().meta({ description: "taxonomy code, e.g. invalid_argument, not_found, idempotency_conflict" }),
  })
  .meta({ id: "Error" });

/** Failure codes of a public operation (behaviours.md A). */
export const OperationFailureCode = z.enum(["invalid_request", "not_found", "conflict", "unavailable", "deadline_exceeded", "internal"]);

export const operationKinds = [
  "sandbox.create",
  "sandbox.delete",
  "sandbox.pause",
  "sandbox.resume",
  "sandbox.suspend",
  "sandbox.restore",
  "sandbox.stop",
  "sandbox.start",
  "sandbox.fork",
  "command.run",
  "command.cancel",
  "template.build",
] as const;
export const OperationKind = z.enum(operationKinds);
export type OperationKind = z.infer<typeof OperationKind>;

export const OperationState = z.enum(["queued", "claimed", "succeeded", "failed"]);
export type OperationState = z.infer<typeof OperationState>;

export const Operation = z
  .object({
    id: z.string(),
    kind: OperationKind,
    state: OperationState,
    target: z.string().nullable().meta({ description: "resource the operation acts on, e.g. sandboxes/<id> or sandboxes/<id>/commands/<cid>" }),
    queued_at: z.string(),
    claimed_at: z.string().nullable(),
    succeeded_at: z.string().nullable(),
    failed_at: z.string().nullable(),
    deadline_at: z.string().nullable(),
    result: z.unknown().nullable(),
    failure: z.object({ code: OperationFailureCode, message: z.string() }).nullable(),
  })
  .meta({ id: "Operation" });
export type Operation = z.infer<typeof Operation>;

export const OperationList = z
  .object({ operations: z.array(Operation), next_cursor: z.string().nullable() })
  .meta({ id: "OperationList" });

// ---------------------------------------------------------------- sandboxes

const positiveInt = (field: string) =>
  z.number({ message: `${field} must be a number` }).int(`${field} must be an integer`).positive(`${field} must be a positive integer`);

export const NetworkSpec = z
  .object({
    allow_internet_access: z.boolean().optional(),
    allow_out: z.array(z.string()).optional(),
    deny_out: z.array(z.string()).optional(),
    allow_public_traffic: z.boolean().optional(),
    /** Native policy v1: every deny precedes every allow, then `default`. */
    rules: z.array(NativeRule).max(1000).optional(),
    default: z.enum(["allow", "deny"]).optional().meta({ description: "verdict when no rule matches (default allow, deny when allow_internet_access is false)" }),
    mode: z.enum(["enforce", "observe"]).optional().meta({ description: "observe: nothing is blocked, every destination is recorded (GET /v1/sandboxes/{id}/network); default enforce" }),
  })
  .strict()
  .meta({ id: "NetworkSpec" });

export const NetworkObservation = z
  .object({
    mode: z.enum(["enforce", "observe"]),
    observed: z.array(ObservedDestination).meta({ description: "every destination the sandbox opened flows to (observe mode)" }),
    denied: z.array(ObservedDestination).meta({ description: "destinations its policy refused (in observe mode: would have refused)" }),
    proposed_network: z
      .object({ default: z.literal("deny"), rules: z.array(NativeRule) })
      .meta({ description: "the observed set as a policy that applies as is (a create's `network`)" }),
  })
  .meta({ id: "NetworkObservation" });

export const CreateSandboxBody = z
  .object({
    template: z.string().min(1).max(256).default("base"),
    vcpu: positiveInt("vcpu").max(256).optional(),
    memory_mib: positiveInt("memory_mib").min(64, "memory_mib must be at least 64").optional(),
    disk_mib: positiveInt("disk_mib").min(64, "disk_mib must be at least 64").optional(),
    env: EnvVars.optional(),
    metadata: Metadata.optional(),
    timeout_s: z.number().int().min(1).max(24 * 3600).optional().meta({ description: "seconds until the sandbox is killed (default 300)" }),
    network: NetworkSpec.optional(),
  })
  .strict()
  .meta({ id: "CreateSandbox" });
export type CreateSandboxBody = z.infer<typeof CreateSandboxBody>;

/** Lifecycle verbs take an optional empty object (strict: no fields yet). */
export const EmptyBody = z.object({}).strict().meta({ id: "Empty" });

export const ForkSandboxBody = z
  .object({ metadata: Metadata.optional(), timeout_s: z.number().int().min(1).max(24 * 3600).optional() })
  .strict()
  .meta({ id: "ForkSandbox" });

export const Sandbox = z
  .object({
    id: z.string(),
    state: z.string(),
    template: z.string(),
    alias: z.string().nullable(),
    vcpu: z.number(),
    memory_mib: z.number(),
    disk_mib: z.number(),
    metadata: z.record(z.string(), z.string()),
    node_id: z.string().nullable(),
    created_at: z.string(),
    started_at: z.string(),
    end_at: z.string(),
    reason: z.string().nullable(),
  })
  .meta({ id: "Sandbox" });
export type Sandbox = z.infer<typeof Sandbox>;

export const SandboxList = z
  .object({ sandboxes: z.array(Sandbox), next_cursor: z.string().nullable() })
  .meta({ id: "SandboxList" });

export const SandboxIdParams = z.object({ id: z.string().min(1).max(64) }).strict();

export const ListSandboxesQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: z.string().max(512).optional(),
    state: z.string().optional().meta({ description: "comma-separated states (default: live states)" }),
  })
  .strict();

// ---------------------------------------------------------------- commands

export const RunCommandBody = z
  .object({
    cmd: z.string().min(1, "cmd must be a non-empty string").max(4096),
    args: z.array(z.string().max(128 * 1024)).max(4096).optional(),
    cwd: z.string().min(1).max(4096).optional(),
    env: EnvVars.optional(),
    user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, "user must be a Unix user name").optional(),
    timeout_s: z.number().int().min(1).max(24 * 3600).optional().meta({ description: "kill the command after this long (default 3600)" }),
  })
  .strict()
  .meta({ id: "RunCommand" });
export type RunCommandBody = z.infer<typeof RunCommandBody>;

export const CommandState = z.enum(["queued", "running", "exited", "failed", "killed"]);

export const Command = z
  .object({
    id: z.string(),
    sandbox_id: z.string(),
    operation_id: z.string().nullable(),
    state: CommandState,
    cmd: z.string(),
    args: z.array(z.string()),
    cwd: z.string().nullable(),
    user: z.string().nullable(),
    pid: z.number().nullable(),
    exit_code: z.number().nullable(),
    error: z.string().nullable(),
    output_bytes: z.number(),
    output_chunks: z.number(),
    created_at: z.string(),
    started_at: z.string().nullable(),
    ended_at: z.string().nullable(),
  })
  .meta({ id: "Command" });
export type Command = z.infer<typeof Command>;

export const CommandParams = z.object({ id: z.string().min(1).max(64), cid: z.string().min(1).max(64) }).strict();

export const OutputQuery = z
  .object({
    after: z.coerce.number().int().min(0).default(0).meta({ description: "return chunks with seq > after (chunks are numbered from 1)" }),
    limit: z.coerce.number().int().min(1).max(1000).default(256),
    follow: z
      .enum(["true", "false", "1", "0", ""])
      .optional()
      .transform((v) => v === "true" || v === "1" || v === ""),
  })
  .strict();

export const OutputChunk = z
  .object({
    seq: z.number(),
    stream: z.enum(["stdout", "stderr", "pty"]),
    offset: z.number().meta({ description: "byte offset of the chunk in the command's combined output" }),
    data: z.string().meta({ description: "base64 bytes" }),
  })
  .meta({ id: "OutputChunk" });

export const OutputPage = z
  .object({
    chunks: z.array(OutputChunk),
    next_after: z.number(),
    done: z.boolean().meta({ description: "the command ended and every chunk was returned" }),
    state: CommandState,
    exit_code: z.number().nullable(),
  })
  .meta({ id: "OutputPage" });

export const CancelCommandBody = z
  .object({ signal: z.enum(["SIGTERM", "SIGKILL"]).default("SIGKILL") })
  .strict()
  .meta({ id: "CancelCommand" });

// ---------------------------------------------------------------- operations

export const OperationParams = z.object({ id: z.string().min(1).max(64) }).strict();

/** `30s`, `500ms`, `1m`, or a bare number of seconds; at most 60 s. */
export const WaitDuration = z
  .string()
  .regex(/^\d+(\.\d+)?(ms|s|m)?$/, "wait must be a duration such as 30s, 500ms or 1m")
  .transform((v) => {
    const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(v)!;
    const n = Number(m[1]);
    const ms = m[2] === "ms" ? n : m[2] === "m" ? n * 60_000 : n * 1000;
    return Math.min(ms, 60_000);
  });

export const GetOperationQuery = z.object({ wait: WaitDuration.optional() }).strict();

export const ListOperationsQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: z.string().max(512).optional(),
    state: OperationState.optional(),
    kind: OperationKind.optional(),
    target: z.string().max(256).optional(),
  })
  .strict();
