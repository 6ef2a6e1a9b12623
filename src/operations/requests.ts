/**
 * What an operation's row holds, kind by kind: the request (the wire between admission
 * in src/api/native and the handlers here) and the target. The request is what
 * idempotency hashes, so it holds exactly the caller's intent (never ids the server
 * picked); ids chosen at admission travel in the target (`sandboxes/<id>`,
 * `sandboxes/<id>/commands/<cid>`, `builds/<id>`, `volumes/<id>`). The Native bodies that are requests
 * are defined here, once: the routes validate with them and `/v1/openapi.json` shows
 * them (through api/native/native-schemas.ts); a handler validates its row again, so an
 * unreadable row fails clearly.
 */
import { z } from "zod";
import { SpaceError } from "../core/errors.ts";
import { LIMITS, boundedStringMap, timeoutSeconds, utf8Bytes } from "../core/limits.ts";
import { NativeRule } from "../sandboxes/egress-rules.ts";

export const Metadata = boundedStringMap("metadata", LIMITS.metadata).meta({
  description: `string labels, filterable in lists: at most ${LIMITS.metadata.maxEntries} entries, keys ${LIMITS.metadata.maxKeyBytes} bytes, values ${LIMITS.metadata.maxValueBytes} bytes, ${LIMITS.metadata.maxTotalBytes} bytes in total`,
});
export const EnvVars = boundedStringMap("env", LIMITS.envVars, z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "an environment variable name")).meta({
  description: `at most ${LIMITS.envVars.maxEntries} variables, values ${LIMITS.envVars.maxValueBytes} bytes, ${LIMITS.envVars.maxTotalBytes} bytes in total`,
});

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

/** A volume a create mounts (docs/volumes.md): any number read-only at once, read-write exclusive. */
export const VolumeMountSpec = z
  .object({
    name: z.string().max(256).meta({ description: "the volume's name (a volume of the caller's tenant)" }),
    path: z.string().max(4096).meta({ description: "absolute path in the sandbox, not under /proc, /sys, /dev, /run, /etc, /usr, /bin, /sbin, /lib*, /boot or /opt/space" }),
    read_only: z.boolean().default(false).meta({ description: "mount read-only (shared); default read-write (exclusive: refused while another sandbox holds the volume)" }),
  })
  .strict()
  .meta({ id: "VolumeMount" });

export const CreateSandboxBody = z
  .object({
    template: z.string().min(1).max(256).default("base"),
    vcpu: positiveInt("vcpu").max(256).optional(),
    memory_mib: positiveInt("memory_mib").min(64, "memory_mib must be at least 64").optional(),
    disk_mib: positiveInt("disk_mib").min(64, "disk_mib must be at least 64").optional(),
    env: EnvVars.optional(),
    metadata: Metadata.optional(),
    timeout_s: timeoutSeconds("timeout_s").optional().meta({ description: "seconds until the sandbox is killed (default 300, at most 86400)" }),
    network: NetworkSpec.optional(),
    wait_for_capacity: z
      .boolean()
      .optional()
      .meta({ description: "when no node has room, wait in the queue for one until the operation's deadline instead of failing at once (default false)" }),
    volumes: z.array(VolumeMountSpec).max(16).optional().meta({ description: "volumes to mount (all on one node: the sandbox is placed there)" }),
  })
  .strict()
  .meta({ id: "CreateSandbox" });
export type CreateSandboxBody = z.infer<typeof CreateSandboxBody>;

export const RunCommandBody = z
  .object({
    cmd: z.string().min(1, "cmd must be a non-empty string").max(4096),
    args: z
      .array(z.string().max(128 * 1024))
      .max(4096)
      .refine((a) => a.reduce((n, x) => n + utf8Bytes(x), 0) <= LIMITS.command.maxArgsBytes, `args may hold at most ${LIMITS.command.maxArgsBytes} bytes in total`)
      .optional(),
    cwd: z.string().min(1).max(4096).optional(),
    env: EnvVars.optional(),
    user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, "user must be a Unix user name").optional(),
    timeout_s: z.number().int().min(1).max(24 * 3600).optional().meta({ description: "kill the command after this long (default 3600)" }),
  })
  .strict()
  .meta({ id: "RunCommand" });
export type RunCommandBody = z.infer<typeof RunCommandBody>;

/** A build request: a source, Dockerfile-like steps (COPY needs the ECW files upload), start/ready commands. */
export const BuildTemplateBody = z
  .object({
    from_template: z.string().min(1).optional(),
    from_image: z.string().min(1).optional().meta({ description: "a registry image ([registry/]repository[:tag][@sha256:digest], pulled by the building node and pinned to its digest), or oci-archive:<path>, oci:<dir>[:tag] or docker-archive:<path> on the building node" }),
    steps: z.array(z.object({ type: z.enum(["RUN", "ENV", "WORKDIR", "USER"]), args: z.array(z.string()).min(1) }).strict()).max(500).default([]),
    start_cmd: z.string().min(1).optional(),
    ready_cmd: z.string().min(1).optional(),
    capture_after_ready: z.boolean().default(false).meta({ description: "checkpoint the template once start_cmd is ready; sandboxes restore from it" }),
    force: z.boolean().default(false),
    tags: z.array(z.string()).max(20).default([]),
    vcpu: z.number().int().min(1).max(64).optional(),
    memory_mib: z.number().int().min(128).max(262_144).optional(),
  })
  .strict();
export type BuildTemplateBody = z.infer<typeof BuildTemplateBody>;

export const CreateVolumeBody = z
  .object({
    name: z.string().max(256).meta({ description: "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit; unique in the tenant" }),
    size_mib: positiveInt("size_mib").min(16, "size_mib must be at least 16").max(16_777_216, "size_mib must be at most 16777216 (16 TiB)").optional().meta({ description: "its quota (default SPACE_VOLUME_DEFAULT_MIB)" }),
  })
  .strict()
  .meta({ id: "CreateVolume" });
export type CreateVolumeBody = z.infer<typeof CreateVolumeBody>;

export const SandboxCreateRequest = CreateSandboxBody;
export const SandboxRequest = z.object({ sandbox_id: z.string() });
export const SandboxSuspendRequest = SandboxRequest.extend({ memory: z.boolean().optional() });
export const SandboxForkRequest = SandboxRequest.extend({ metadata: z.record(z.string(), z.string()).optional(), timeout_s: z.number().int().optional() });
export const CommandRunRequest = RunCommandBody.extend({ sandbox_id: z.string() });
export const CommandCancelRequest = z.object({ sandbox_id: z.string(), command_id: z.string(), signal: z.enum(["SIGTERM", "SIGKILL"]) });
export const TemplateBuildRequest = BuildTemplateBody.extend({ name: z.string() });
export const VolumeCreateRequest = CreateVolumeBody;
export const VolumeRequest = z.object({ volume_id: z.string() });

// ---------------------------------------------------------------- targets

/** What an operation's target names. */
export type TargetKind = "sandbox" | "command" | "build" | "volume";

export const sandboxTarget = (id: string) => `sandboxes/${id}`;
export const commandTarget = (sandboxId: string, commandId: string) => `sandboxes/${sandboxId}/commands/${commandId}`;
export const buildTarget = (buildId: string) => `builds/${buildId}`;
export const volumeTarget = (volumeId: string) => `volumes/${volumeId}`;

/** `sandboxes/<id>[/commands/<cid>]` → its ids. */
export function parseTarget(target: string | null): { sandboxId: string; commandId?: string } {
  const m = /^sandboxes\/([^/]+)(?:\/commands\/([^/]+))?$/.exec(target ?? "");
  if (!m) throw new SpaceError("internal", `operation target ${JSON.stringify(target)} is not sandboxes/<id>[/commands/<cid>]`);
  return m[2] ? { sandboxId: m[1]!, commandId: m[2] } : { sandboxId: m[1]! };
}

/** `builds/<id>` → the build id. */
export function parseBuildTarget(target: string | null): string {
  // UUIDs; `bd_…` for builds made before build ids were UUIDs.
  const m = /^builds\/(bd_[A-Za-z0-9]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/.exec(target ?? "");
  if (!m) throw new SpaceError("internal", `operation target ${JSON.stringify(target)} is not builds/<id>`);
  return m[1]!;
}

/** `volumes/<id>` → the volume id. */
export function parseVolumeTarget(target: string | null): string {
  const m = /^volumes\/(vol_[a-z0-9]{16})$/.exec(target ?? "");
  if (!m) throw new SpaceError("internal", `operation target ${JSON.stringify(target)} is not volumes/<id>`);
  return m[1]!;
}
