/**
 * The results operations end with, as the Native wire shows them (snake_case, ISO
 * timestamps): a sandbox for the `sandbox.*` kinds, a command's outcome for `command.*`,
 * the build for `template.build`. The routes that read the same nouns use these too.
 */
import { z } from "zod";
import { endAtOf, startedAtOf, type SandboxRecord } from "../sandboxes/model.ts";
import type { Build } from "../store/templates.ts";
import type { Command as CommandRow } from "../store/commands.ts";

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

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

export function toSandbox(r: SandboxRecord): Sandbox {
  return {
    id: r.id,
    state: r.state,
    template: r.templateId ?? "",
    alias: r.alias,
    vcpu: r.vcpu,
    memory_mib: r.memoryMib,
    disk_mib: r.diskMib,
    metadata: r.metadata,
    node_id: r.nodeId,
    created_at: r.createdAt.toISOString(),
    started_at: startedAtOf(r).toISOString(),
    end_at: endAtOf(r).toISOString(),
    reason: r.failureMessage,
  };
}

/** How a command ended (or where it is): the result of `command.run` and `command.cancel`. */
export interface CommandOutcome {
  command_id: string;
  state: CommandRow["state"];
  exit_code: number | null;
}

export function toCommandOutcome(c: Pick<CommandRow, "id" | "state" | "exitCode">): CommandOutcome {
  return { command_id: c.id, state: c.state, exit_code: c.exitCode };
}

/** A build on the Native wire. */
export function toNativeBuild(b: Build) {
  return {
    id: b.id,
    status: b.status,
    vcpu: b.vcpu,
    memory_mib: b.memoryMib,
    disk_mib: b.diskMib,
    rootfs_size_mib: b.rootfsSizeMib,
    environment: b.environment,
    digest: b.digest,
    /** The registry manifest a registry-image build was pinned to. */
    image_digest: (b.spec as { result?: { imageDigest?: string } } | null)?.result?.imageDigest ?? null,
    error: b.error,
    created_at: iso(b.createdAt),
    started_at: iso(b.startedAt),
    finished_at: iso(b.finishedAt),
  };
}
