/**
 * Volumes: persistent storage that outlives sandboxes (docs/volumes.md). A volume lives on
 * one node at a time as a btrfs subvolume with its own quota (node/disk/volume-disks.ts); a
 * sandbox that mounts it is placed on that node; an unattached volume moves to another node
 * through the blob store (send/receive, encrypted like snapshots) when placement or a drain
 * needs it. ECW, Native and the content API share this one service.
 */
import { SpaceError, conflict, invalid, notFound } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { TenantId } from "../core/ids.ts";
import type { SpecVolume } from "../contract/volume-wire.ts";
import type { Db } from "../store/db.ts";
import type { QuotaLimits } from "../store/tenant-quotas.ts";
import {
  attachVolumes,
  claimVolumeNode,
  createVolume,
  deleteVolume,
  getVolume,
  getVolumeByName,
  listVolumes,
  moveVolumeNode,
  volumeById,
  volumeForToken,
  volumeHolders,
  volumeMountsBySandbox,
  volumeMountsOf,
  volumesOnNode,
  type Volume,
  type VolumeMount,
} from "../store/volumes.ts";
import type { ProxyTarget, Substrate } from "../substrate/substrate.ts";

export type { Volume, VolumeMount };

/** What a create asks to mount. */
export interface VolumeMountRequest {
  name: string;
  path: string;
  readOnly: boolean;
}

export const VOLUME_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
/** Paths a volume may not cover: the runtime's own mounts and envd's. */
const RESERVED = ["/proc", "/sys", "/dev", "/run", "/opt/space", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot"];

export function validateVolumeName(name: string): void {
  if (!VOLUME_NAME.test(name)) {
    throw invalid(`volume name ${JSON.stringify(name)} is not valid: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`, { field: "name" });
  }
}

/** Validates a create's mounts: known names' shape, absolute clean paths, none reserved, none twice. */
export function validateVolumeMounts(mounts: readonly VolumeMountRequest[]): void {
  const seen = new Set<string>();
  for (const m of mounts) {
    validateVolumeName(m.name);
    const p = m.path;
    const clean = p.startsWith("/") && !p.endsWith("/") && !p.split("/").slice(1).some((s) => s === "" || s === "." || s === "..");
    if (!clean || p === "/" || p.length > 1024) throw invalid(`volume mount path ${JSON.stringify(p)} must be an absolute path without '.', '..' or a trailing '/'`, { field: "volumeMounts" });
    if (RESERVED.some((r) => p === r || p.startsWith(`${r}/`))) throw invalid(`volume mount path ${p} is reserved`, { field: "volumeMounts" });
    if (seen.has(p)) throw invalid(`volume mount path ${p} is given twice`, { field: "volumeMounts" });
    seen.add(p);
  }
}

/** The `domain` an E2B volume answer carries: E2B's SDK sends content calls to `https://api.<domain>`. */
export function volumeDomain(publicApiUrl: string): string | undefined {
  if (!publicApiUrl) return undefined;
  try {
    const u = new URL(publicApiUrl);
    if (u.protocol !== "https:" || !u.hostname.startsWith("api.") || (u.pathname !== "/" && u.pathname !== "")) return undefined;
    return u.host.slice(4);
  } catch {
    return undefined;
  }
}

export interface SandboxVolumesDeps {
  db: Db;
  substrate: Substrate;
  log: Logger;
  /** SPACE_VOLUME_DEFAULT_MIB. */
  defaultSizeMib: number;
  /** Tenant quota defaults (SPACE_QUOTA_VOLUMES, SPACE_QUOTA_VOLUME_MIB); absent = none. */
  quotas?: QuotaLimits;
}

const NODE_CALL_MS = 30 * 60_000;

export class SandboxVolumes {
  readonly #d: SandboxVolumesDeps;

  constructor(deps: SandboxVolumesDeps) {
    this.#d = deps;
  }

  /** `o.id`: the id chosen at admission (a Native operation names its volume from the first answer). */
  async create(tenantId: TenantId, name: string, o: { sizeMib?: number; id?: string } = {}): Promise<Volume> {
    validateVolumeName(name);
    const size = o.sizeMib ?? this.#d.defaultSizeMib;
    if (!Number.isInteger(size) || size < 16) throw invalid(`size_mib=${size} must be an integer of at least 16`, { field: "size_mib" });
    return createVolume(this.#d.db, { tenantId, name, sizeMib: size, ...(o.id ? { id: o.id } : {}), ...(this.#d.quotas ? { quotas: this.#d.quotas } : {}) });
  }

  /** The tenant's volume; another tenant's is not found. */
  async get(tenantId: TenantId, id: string): Promise<Volume> {
    const v = await getVolume(this.#d.db, tenantId, id);
    if (!v) throw notFound(`volume ${id} not found`);
    return v;
  }

  /** The tenant's volume by id or, failing that, by name; another tenant's is not found. */
  async find(tenantId: TenantId, idOrName: string): Promise<Volume> {
    const v = (await getVolume(this.#d.db, tenantId, idOrName)) ?? (await getVolumeByName(this.#d.db, tenantId, idOrName));
    if (!v) throw notFound(`volume ${idOrName} not found`);
    return v;
  }

  list(tenantId: TenantId): Promise<Volume[]> {
    return listVolumes(this.#d.db, tenantId);
  }

  /** The sandboxes holding it now. */
  holders(volumeId: string): Promise<{ sandboxId: string; readOnly: boolean }[]> {
    return volumeHolders(this.#d.db, volumeId);
  }

  /** Deletes it (refused while a sandbox holds it), then its data on its node. */
  async delete(tenantId: TenantId, id: string, signal: AbortSignal): Promise<void> {
    const v = await deleteVolume(this.#d.db, tenantId, id);
    if (!v.nodeId) return;
    await this.#d.substrate.dropVolume(v.nodeId, v.id, signal).catch((e: unknown) =>
      // The row is gone: nothing reaches the data any more; the node keeps the bytes until removed by hand.
      this.#d.log.error({ err: e, volumeId: v.id, nodeId: v.nodeId }, "volume deleted but its node could not drop its data"),
    );
  }

  /** Records a new sandbox's mounts (409 for a mount another sandbox's excludes). */
  attach(tenantId: TenantId, sandboxId: string, mounts: readonly VolumeMountRequest[]): Promise<VolumeMount[]> {
    return attachVolumes(this.#d.db, tenantId, sandboxId, mounts);
  }

  mountsOf(sandboxId: string): Promise<VolumeMount[]> {
    return volumeMountsOf(this.#d.db, sandboxId);
  }

  /** The mounts of each listed sandbox (one read per list page); a sandbox with none is absent. */
  mountsOfMany(sandboxIds: readonly string[]): Promise<Map<string, VolumeMount[]>> {
    return volumeMountsBySandbox(this.#d.db, sandboxIds);
  }

  /** The node the sandbox must run on: its volumes' node (undefined when none is placed yet). */
  pinOf(mounts: readonly VolumeMount[]): string | undefined {
    const nodes = [...new Set(mounts.map((m) => m.nodeId).filter((n): n is string => n !== null))];
    if (nodes.length > 1) {
      throw conflict(`volumes ${mounts.map((m) => m.name).join(", ")} are on different nodes; one sandbox can mount volumes of one node only`);
    }
    return nodes[0];
  }

  /** Puts the mounts' unplaced volumes on `nodeId` (where the sandbox was placed) and returns what the node spec says. */
  async settle(mounts: readonly VolumeMount[], nodeId: string): Promise<SpecVolume[]> {
    for (const m of mounts) {
      if (m.nodeId === nodeId) continue;
      const on = await claimVolumeNode(this.#d.db, m.volumeId, nodeId);
      if (on !== nodeId) throw conflict(`volume '${m.name}' moved to another node meanwhile; create the sandbox again`);
    }
    return mounts.map((m) => ({ volumeId: m.volumeId, path: m.path, readOnly: m.readOnly, sizeMib: m.sizeMib }));
  }

  /**
   * Where the content API of the volume this token opens is forwarded (the volume placed on
   * a node first if it is on none). not_found for a wrong id or token.
   */
  async contentTarget(volumeId: string, token: string, signal: AbortSignal): Promise<ProxyTarget> {
    const v = await volumeForToken(this.#d.db, volumeId, token);
    if (!v) throw notFound(`volume ${volumeId} not found`);
    const nodeId = v.nodeId ?? (await this.#place(v, [], signal));
    return this.#d.substrate.volumeTarget(nodeId, v.id, signal);
  }

  async #place(v: Volume, exclude: readonly string[], signal: AbortSignal): Promise<string> {
    const nodeId = await this.#d.substrate.placeVolume(v.sizeMib, { exclude }, signal);
    await this.#d.substrate.ensureVolume(nodeId, v.id, v.sizeMib, signal);
    const on = await claimVolumeNode(this.#d.db, v.id, nodeId);
    if (on !== nodeId) {
      // Placed elsewhere meanwhile (a sandbox create): that node has it; drop the empty copy made here.
      await this.#d.substrate.dropVolume(nodeId, v.id, signal).catch(() => undefined);
    }
    return on;
  }

  /**
   * Moves an unattached volume off `from` (to `to`, else where placement puts it): the node
   * sends it to the blob store, the new node receives it, the row moves, the old copy goes.
   * Refused (409) while a sandbox holds it.
   */
  async move(volumeId: string, from: string, to: string | undefined, signal: AbortSignal): Promise<string> {
    const holders = await volumeHolders(this.#d.db, volumeId);
    if (holders.length) throw conflict(`volume ${volumeId} is in use by sandbox ${holders[0]!.sandboxId}; it moves once no sandbox holds it`);
    const s = this.#d.substrate;
    const sig = AbortSignal.any([signal, AbortSignal.timeout(NODE_CALL_MS)]);
    const v = await volumeById(this.#d.db, volumeId);
    if (!v || v.nodeId !== from) throw notFound(`volume ${volumeId} is not on node ${from}`);
    const target = to ?? (await s.placeVolume(v.sizeMib, { exclude: [from] }, sig));
    const key = `volumes/${volumeId}/${Date.now().toString(36)}.btrfs`;
    const sent = await s.sendVolume(from, volumeId, key, sig);
    await s.receiveVolume(target, volumeId, sent, sig);
    if (!(await moveVolumeNode(this.#d.db, volumeId, from, target))) {
      await s.dropVolume(target, volumeId, sig).catch(() => undefined);
      throw new SpaceError("aborted", `volume ${volumeId} left node ${from} while it was being moved`);
    }
    await s.dropVolume(from, volumeId, sig).catch((e: unknown) => this.#d.log.warn({ err: e, volumeId, nodeId: from }, "moved volume's old copy could not be dropped"));
    this.#d.log.info({ volumeId, from, to: target, bytes: sent.sizeBytes }, "volume moved");
    return target;
  }

  /** Moves every unattached volume off a draining node: the ids moved, and those still there (held by sandboxes, or failed). */
  async evacuate(nodeId: string, signal: AbortSignal): Promise<{ moved: string[]; stayed: string[] }> {
    const moved: string[] = [];
    const stayed: string[] = [];
    for (const v of await volumesOnNode(this.#d.db, nodeId)) {
      try {
        await this.move(v.id, nodeId, undefined, signal);
        moved.push(v.id);
      } catch (e) {
        this.#d.log.warn({ err: e, volumeId: v.id, nodeId }, "volume not moved off the draining node");
        stayed.push(v.id);
      }
    }
    return { moved, stayed };
  }
}
