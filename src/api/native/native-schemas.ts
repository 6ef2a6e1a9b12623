/**
 * Every Native (`/v1`) wire body, defined once: the routes validate with these, the
 * static types come from them, and `/v1/openapi.json` is generated from them. Objects
 * are strict, so an unknown field is refused with its name.
 */
import { z } from "zod";
import { timeoutSeconds } from "../../core/limits.ts";
import { NativeRule } from "../../sandboxes/egress-rules.ts";
import { ObservedDestination } from "../../contract/egress-policy.ts";
import { operationKinds } from "../../operations/operation-kind.ts";
import { Metadata } from "../../operations/requests.ts";
import { Sandbox, Volume } from "../../operations/results.ts";
import { TOKEN_MAX_LIFETIME_S, tenantScopes } from "../auth.ts";

// The bodies that are operation requests are defined with their kinds (src/operations).
export { CreateSandboxBody, CreateVolumeBody, EnvVars, Metadata, NetworkSpec, RunCommandBody, VolumeMountSpec } from "../../operations/requests.ts";
export { Sandbox, Volume } from "../../operations/results.ts";

// ---------------------------------------------------------------- shared

export const ErrorBody = z
  .object({
    code: z.number().int().meta({ description: "HTTP status" }),
    message: z.string(),
    reason: z.string().meta({ description: "taxonomy code, e.g. invalid_argument, not_found, idempotency_conflict" }),
  })
  .meta({ id: "Error" });

/** Failure codes of a public operation (behaviours.md A). */
export const OperationFailureCode = z.enum(["invalid_request", "not_found", "conflict", "unavailable", "deadline_exceeded", "internal"]);

export const OperationKind = z.enum(operationKinds);
export type OperationKind = z.infer<typeof OperationKind>;

export const OperationState = z.enum(["queued", "claimed", "succeeded", "failed"]);
export type OperationState = z.infer<typeof OperationState>;

export const Operation = z
  .object({
    id: z.string(),
    kind: OperationKind,
    state: OperationState,
    target: z.string().nullable().meta({ description: "resource the operation acts on, e.g. sandboxes/<id>, sandboxes/<id>/commands/<cid> or volumes/<id>" }),
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

/** Lifecycle verbs take an optional empty object (strict: no fields yet). */
export const EmptyBody = z.object({}).strict().meta({ id: "Empty" });

/** E2B's pause option, same word: `memory: false` keeps the disk only (a restore boots fresh from it). */
export const SuspendSandboxBody = z
  .object({ memory: z.boolean().optional().meta({ description: "false: keep only the disk; the restore boots the sandbox fresh from it (processes gone, files kept). Default true: memory and disk" }) })
  .strict()
  .meta({ id: "SuspendSandbox" });

export const ForkSandboxBody = z
  .object({ metadata: Metadata.optional(), timeout_s: timeoutSeconds("timeout_s").optional() })
  .strict()
  .meta({ id: "ForkSandbox" });

export const SandboxList = z
  .object({ sandboxes: z.array(Sandbox), next_cursor: z.string().nullable() })
  .meta({ id: "SandboxList" });

/** A page's `next_cursor`; anything else is 400. */
const Cursor = z.string().max(512).optional().meta({ description: "the next_cursor of the previous page; any other value is refused with 400" });

export const SandboxIdParams = z.object({ id: z.string().min(1).max(64) }).strict();

export const ListSandboxesQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    cursor: Cursor,
    state: z.string().optional().meta({ description: "comma-separated states (default: live states)" }),
  })
  .strict();

// ---------------------------------------------------------------- volumes

export const VolumeList = z.object({ volumes: z.array(Volume) }).meta({ id: "VolumeList" });

export const VolumeIdParams = z.object({ id: z.string().min(1).max(256) }).strict();

// ---------------------------------------------------------------- commands

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
    cursor: Cursor,
    state: OperationState.optional(),
    kind: OperationKind.optional(),
    target: z.string().max(256).optional(),
  })
  .strict();

// ---------------------------------------------------------------- credentials

const Time = z.string().meta({ description: "ISO 8601 time" });
const CredentialName = z.string().max(100).optional().meta({ description: "a label for people; not unique" });

export const CreateApiKeyBody = z.object({ name: CredentialName }).strict().meta({ id: "CreateApiKey" });

export const CreateTokenBody = z
  .object({
    name: CredentialName,
    scopes: z
      .array(z.enum(tenantScopes, { message: `scopes: each one of ${tenantScopes.join(", ")}` }))
      .min(1)
      .meta({ description: "a token may create a token only with scopes it has itself; admin is never granted here" }),
    expires_in_s: z
      .number()
      .int()
      .positive()
      .max(TOKEN_MAX_LIFETIME_S, `expires_in_s must be at most ${TOKEN_MAX_LIFETIME_S} (10 years)`)
      .optional()
      .meta({ description: "lifetime in seconds; absent = never expires (API keys only: a token must give one, and no later than its own expiry)" }),
  })
  .strict()
  .meta({ id: "CreateToken" });

export const CredentialParams = z.object({ id: z.string().min(1).max(64) }).strict();

export const ApiKey = z
  .object({
    id: z.string(),
    name: z.string(),
    prefix: z.string().meta({ description: "the key's first characters (e2b_1a2b3c), for recognising it; the key itself is never stored" }),
    created_at: Time,
    last_used_at: Time.nullable(),
    revoked_at: Time.nullable(),
  })
  .meta({ id: "ApiKey" });
export type ApiKey = z.infer<typeof ApiKey>;
export const ApiKeyList = z.object({ api_keys: z.array(ApiKey) }).meta({ id: "ApiKeyList" });
export const NewApiKey = ApiKey.extend({ key: z.string().meta({ description: "the key: returned by this answer only" }) }).meta({ id: "NewApiKey" });

export const Token = z
  .object({
    id: z.string(),
    name: z.string(),
    prefix: z.string().meta({ description: "the token's first characters (spt_…)" }),
    scopes: z.array(z.string()),
    created_at: Time,
    expires_at: Time.nullable(),
    last_used_at: Time.nullable(),
    revoked_at: Time.nullable(),
  })
  .meta({ id: "Token" });
export type Token = z.infer<typeof Token>;
export const TokenList = z.object({ tokens: z.array(Token) }).meta({ id: "TokenList" });
export const NewToken = Token.extend({ token: z.string().meta({ description: "the token: returned by this answer only" }) }).meta({ id: "NewToken" });
