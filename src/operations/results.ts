/**
 * The results operations end with, as the Native wire shows them (snake_case, ISO
 * timestamps): a sandbox for the `sandbox.*` kinds, a command's outcome for `command.*`,
 * the build for `template.build`, the volume for `volume.*`. The routes that read the same nouns use these too.
 */
import { z } from "zod";
import { endAtOf, startedAtOf, type SandboxRecord } from "../sandboxes/model.ts";
import type { Build } from "../store/templates.ts";
import type { Command as CommandRow } from "../store/commands.ts";
import type { Volume as VolumeRow, VolumeMount } from "../store/volumes.ts";

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
    /**
     * GET of one sandbox: the snapshot a paused (suspended) sandbox resumes from, and its
     * durability — `local` (only on its node: it resumes there, or waits for durable), then
     * `durable` (its parts in the blob store: it resumes on any node); null when none.
     */
    snapshot: z.object({ id: z.string(), durability: z.enum(["local", "durable"]) }).nullable().optional(),
    /** GET of one sandbox: the volumes it was created with. */
    volumes: z.array(z.object({ name: z.string(), path: z.string(), read_only: z.boolean() })).optional(),
  })
  .meta({ id: "Sandbox" });
export type Sandbox = z.infer<typeof Sandbox>;

export function toSandbox(r: SandboxRecord, snapshot?: Sandbox["snapshot"]): Sandbox {
  return {
    ...(snapshot !== undefined ? { snapshot } : {}),
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

export const toSandboxVolumes = (mounts: readonly VolumeMount[]): NonNullable<Sandbox["volumes"]> =>
  mounts.map((m) => ({ name: m.name, path: m.path, read_only: m.readOnly }));

export const Volume = z
  .object({
    id: z.string(),
    name: z.string(),
    size_mib: z.number(),
    node_id: z.string().nullable().meta({ description: "the node that holds it; null until a sandbox or a content call first needs it" }),
    created_at: z.string(),
    /** Create and GET of one volume: the bearer token of its content API (E2B's `/volumecontent/{id}/…`). */
    token: z.string().optional(),
    /** GET of one volume: the sandboxes holding it now. */
    mounted_by: z.array(z.object({ sandbox_id: z.string(), read_only: z.boolean() })).optional(),
  })
  .meta({ id: "Volume" });
export type Volume = z.infer<typeof Volume>;

export function toNativeVolume(v: VolumeRow, o: { token?: boolean; mountedBy?: readonly { sandboxId: string; readOnly: boolean }[] } = {}): Volume {
  return {
    id: v.id,
    name: v.name,
    size_mib: v.sizeMib,
    node_id: v.nodeId,
    created_at: v.createdAt.toISOString(),
    ...(o.token ? { token: v.token } : {}),
    ...(o.mountedBy ? { mounted_by: o.mountedBy.map((h) => ({ sandbox_id: h.sandboxId, read_only: h.readOnly })) } : {}),
  };
}

/** The result of `volume.delete`. */
export interface VolumeDeleted {
  id: string;
  deleted: true;
}
export const toVolumeDeleted = (d: VolumeDeleted): VolumeDeleted => d;

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
    /** Image blob bytes that build fetched from the registry (0: every layer was on the node); null for other sources. */
    pulled_bytes: (b.spec as { result?: { pulledBytes?: number } } | null)?.result?.pulledBytes ?? null,
    error: b.error,
    created_at: iso(b.createdAt),
    started_at: iso(b.startedAt),
    finished_at: iso(b.finishedAt),
  };
}
