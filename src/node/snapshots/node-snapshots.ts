/**
 * Node-side snapshots: suspend (memory checkpoint + read-only disk snapshot, node freed),
 * live captures (fork, named snapshots: the source keeps running), publication to the
 * blob store, and restore — from the local copy, or from the blob store on any node.
 * A `disk` snapshot (E2B's filesystem-only pause) is the same minus the CRIU image: no
 * freeze (one btrfs snapshot is already of one instant), no memory part, and its restore
 * boots the sandbox fresh from the disk (the template's boot settings, as after a stop).
 *
 * Layout (node cache, btrfs):
 *   <cache>/snapshots/<snapshotId>/disk     read-only subvolume of the sandbox's disk
 *   <cache>/snapshots/parents/<uuid>/<name>  a parent (template) received from the blob store
 *   <nodeDir>/snapshots/<snapshotId>/image   CRIU images (full snapshots); meta.json beside it
 *
 * Blob store (one key per part; sha256 of the stored bytes recorded in the descriptor):
 *   snapshots/<snapshotId>/memory.tar.zst[.enc]  the CRIU image dir as zstd-compressed tar
 *                                             (full snapshots; `memory.tar[.enc]`, uncompressed,
 *                                             from before: still restored)
 *   snapshots/<snapshotId>/disk.btrfs[.enc]  `btrfs send -p <parent>` of the disk
 *   parents/<uuid>.btrfs                      full `btrfs send` of a parent (template), plaintext
 *   parents/<uuid>.btrfs.enc + parents/<uuid>.json   the same encrypted under its own data key;
 *                                             the .json (key, sha256, size, wrapped key) is
 *                                             written last: it marks the parent published
 *
 * Consistency: the container is frozen, the disk snapshotted, then the memory dumped while
 * still frozen, so disk and memory are of the same instant. A failed suspend thaws the
 * container and leaves it running (never half).
 */
import { createHash, randomBytes } from "node:crypto";
import { renameSync, unlinkSync } from "node:fs";
import { lstat, mkdir, readdir, readFile, rm, rmdir, stat, statfs, symlink, utimes, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { BlobStore } from "../../blob/blob-store.ts";
import { newDataKey, unwrapKey, wrapKey } from "../../core/envelope.ts";
import { SpaceError } from "../../core/errors.ts";
import { exec } from "../../core/exec.ts";
import { settleAll } from "../../core/settle.ts";
import type { Logger } from "../../core/log.ts";
import { checkpointerFor, writeMeta, type CheckpointMeta, type Checkpointer } from "../../runtime/oci/checkpoint.ts";
import type { Runtime } from "../../runtime/runtime.ts";
import type { SandboxSpec, SandboxStatus } from "../../contract/node-api.ts";
import type { SnapshotDescriptor, SnapshotKind, SnapshotPartInfo } from "../../contract/snapshot-descriptor.ts";
import * as btrfs from "../disk/btrfs.ts";
import { pipeInto } from "../disk/pipes.ts";
import { downloadVerified, fetchSubvolume, openSealed, putFile, putSubvolume, receiveSubvolume, type BlobPart } from "../disk/subvolume-stream.ts";
import { treeSizeMib, type Disks } from "../disk/disks.ts";
import { exists } from "../disk/node-cache.ts";
import type { SandboxManager } from "../sandboxes/manager.ts";

interface LocalMeta {
  snapshotId: string;
  sourceSandboxId: string;
  template: string;
  parentPath: string;
  parentUuid: string;
  /** The CRIU image's meta; absent = a disk snapshot (no memory). */
  checkpoint?: CheckpointMeta;
  /** When this copy was captured or fetched (ISO). */
  createdAt?: string;
  /** Every part is in the blob store (published by this node, or fetched from it): the node's copy may be reaped. */
  durable?: boolean;
  /** Under simple quotas, the disk's whole size: what a disk restored from it starts from (Disks.limitSandboxDisk). */
  diskBaseMib?: number;
}

/** A local snapshot copy as the node's reaper sees it. */
export interface LocalSnapshot {
  snapshotId: string;
  createdAt: Date;
  /** The last restore from it (else its creation). */
  lastUsedAt: Date;
  durable: boolean;
  /** A restore or fetch is using it right now. */
  inUse: boolean;
}

export interface NodeSnapshotsOptions {
  nodeDir: string;
  runtime: Runtime;
  disks: Disks;
  manager: SandboxManager;
  blob?: BlobStore;
  /** Cluster key (SPACE_ENCRYPTION_KEY); absent = no encryption at rest. */
  clusterKey?: Buffer;
  /** The key before a rotation (SPACE_ENCRYPTION_KEY_PREVIOUS): unwraps what it wrapped, never wraps. */
  previousKey?: Buffer;
  logger: Logger;
  /**
   * Memory images dumped into a tmpfs first (SPACE_NODE_SNAPSHOT_STAGING_*): a dirty
   * sandbox's dump runs at memory speed, not at the speed this node's disk takes page-cache
   * writes, and the pause answers sooner. Absent or a zero budget = dumped to disk.
   */
  staging?: { dir: string; budgetMib: number };
  /** How long slots and disks are kept for a restore here (SPACE_NODE_SLOT_KEEP_MS); 0 or absent = a capture prepares no fork. */
  keepMs?: number;
}

/**
 * The staging dir a node uses unless SPACE_NODE_SNAPSHOT_STAGING_DIR names one: in the
 * host's shared tmpfs, named after the node dir, so a node touches only its own.
 */
export function defaultStagingDir(nodeDir: string): string {
  return join("/dev/shm", `space-staging-${createHash("sha256").update(resolve(nodeDir)).digest("hex").slice(0, 12)}`);
}

const T = 10 * 60_000;
/** How long a staged image stays in memory before it moves to disk (see `settle`). */
const SETTLE_AFTER_MS = 2000;
/** The checkpoint meta of an image that recorded none. */
const NO_LOG: CheckpointMeta = { logPath: "/dev/null", logSize: 0, config: {} };
const SNAP = /^sn_[a-z0-9]{16}$/;
/**
 * The memory part's name in the blob store. A sandbox's memory is mostly zero or repeated
 * pages (heaps, buffers): zstd at its fastest level shrinks an idle sandbox's 19 MiB image
 * several times over, at GB/s, and so the upload, the bytes at rest and a restore elsewhere.
 * libarchive's bsdtar compresses and decompresses in its own process: GNU tar pipes the
 * whole uncompressed image through a zstd child, and that copy was most of a dirty
 * sandbox's publication (256 MiB: ~190 ms against ~50). It reads both the plain
 * `memory.tar` of earlier versions and GNU tar's `.tar.zst`. Two zstd workers: a dirty
 * sandbox's 256 MiB packed in ~67 ms, not ~84, on this 2-core host (bsdtar's own read
 * of the image is the rest); the frames stay readable by any zstd.
 */
const MEMORY_PART = "memory.tar.zst";
const PACK = ["bsdtar", "--zstd", "--options", "zstd:compression-level=1,zstd:threads=2"];
const UNPACK = ["bsdtar", "-xf", "-"];

/** How a restore of a checkpoint many sandboxes start from (a template's capture after boot, node/templates/boot-capture.ts) may run. */
export interface RestoreOptions {
  /** Take a disk made ahead of the snapshot's (`Disks.warmFrom`), and keep some made for the next. */
  warmDisks?: boolean;
  /** Restore beside the network's set-up: the checkpoint's processes need none of the slot's addresses (envd listens on a wildcard one). */
  beforeNetwork?: boolean;
}

export class NodeSnapshots {
  private readonly o: NodeSnapshotsOptions;
  private readonly cp: Checkpointer;
  private readonly fetching = new Map<string, Promise<Record<string, number>>>();
  /** Parents being received (uuid → receive): concurrent restores of one parent share one `btrfs receive`. */
  private readonly receivingParents = new Map<string, Promise<void>>();
  /** Parents being published (uuid → publish): concurrent suspends of one template send it once. */
  private readonly publishingParents = new Map<string, Promise<void>>();
  /** Publications in flight (snapshot id → its durable descriptor, and the abort a drop of the copy pulls). */
  private readonly publishing = new Map<string, { done: Promise<SnapshotDescriptor>; abort: AbortController }>();
  /** Restores and publications using a local copy (snapshot id → count): the reaper never frees these. */
  private readonly users = new Map<string, number>();
  /** Local copies being reaped: a restore waits, then fetches the snapshot again. */
  private readonly reaping = new Map<string, Promise<void>>();
  /** Images in the staging tmpfs (snapshot id → MiB of the budget held), and their moves to disk. */
  private readonly staged = new Map<string, { mib: number; settled?: Promise<void>; cancel?: AbortController }>();
  /** Resolved by `stop`: moves to disk waiting out SETTLE_AFTER_MS start at once. */
  private stopNow: () => void = () => {};
  private readonly stopping = new Promise<void>((r) => (this.stopNow = r));
  private unsafeRootLogged = false;
  /** Restores a capture is preparing (sandbox id → the set-up of its disk and slot; never rejects). */
  private readonly prepared = new Map<string, Promise<void>>();

  constructor(o: NodeSnapshotsOptions, cp: Checkpointer) {
    this.o = o;
    this.cp = cp;
  }

  static create(o: NodeSnapshotsOptions): NodeSnapshots | undefined {
    const cp = checkpointerFor(o.runtime);
    return cp ? new NodeSnapshots(o, cp) : undefined;
  }

  private get cacheSnaps(): string {
    return join(this.o.disks.cache.mountPath, "snapshots");
  }
  private diskPath(snapshotId: string): string {
    return join(this.cacheSnaps, snapshotId, "disk");
  }
  private localDir(snapshotId: string): string {
    return join(this.o.nodeDir, "snapshots", snapshotId);
  }
  /** The subvolume a sandbox's disk descends from (its template, or a received parent). */
  private async parentOf(sandboxId: string, template: string): Promise<{ path: string; uuid: string }> {
    const note = await this.o.disks.note(sandboxId, "parent");
    const rec = note === undefined ? undefined : (JSON.parse(note) as { path: string; uuid: string });
    if (rec && (await exists(rec.path))) return rec;
    const path = this.o.disks.templatePath(template);
    return { path, uuid: await btrfs.sendIdentity(path) };
  }

  // ------------------------------------------------------------------ capture

  /**
   * Suspend: freeze, disk snapshot, memory dump (the processes end; `kind: "disk"`: the
   * disk snapshot only, the processes end with the release), node resources released;
   * then the parts are published when a blob store is configured.
   */
  async suspend(sandboxId: string, snapshotId: string, opts: { upload: boolean; kind?: SnapshotKind }, signal: AbortSignal): Promise<SnapshotDescriptor> {
    const timings: Record<string, number> = {};
    let meta: LocalMeta | undefined;
    const t0 = performance.now();
    await this.o.manager.suspend(
      sandboxId,
      async () => {
        const st = this.o.manager.get(sandboxId);
        // The manager resumed a resident-paused sandbox before this: it is running.
        meta = await this.snapshot(sandboxId, st.template, snapshotId, { kind: opts.kind ?? "full", leaveRunning: false, wasPaused: false, memoryMib: st.memoryMib, timings }, signal);
      },
      signal,
      // A full capture ends the processes frozen since its disk snapshot: the disk equals it.
      (opts.kind ?? "full") === "full" ? { keepDiskFor: snapshotId } : {},
    );
    timings.captureMs = ms(t0);
    await this.o.disks.removeNote(sandboxId, "parent").catch(() => undefined);
    return this.finish(meta!, opts.upload, timings, signal).finally(() => void this.settle(snapshotId));
  }

  /**
   * Capture: a snapshot of a running sandbox that keeps running (fork, named snapshots).
   * `restoreAs`: the ids it will be restored as here (forks); each one's disk and network
   * slot are set up while the memory is dumped and kept for the restore to take (`prepare`).
   */
  async capture(sandboxId: string, snapshotId: string, opts: { upload: boolean; restoreAs?: string[] }, signal: AbortSignal): Promise<SnapshotDescriptor> {
    const timings: Record<string, number> = {};
    const t0 = performance.now();
    const meta = await this.o.manager.withRunning(sandboxId, (st) =>
      this.snapshot(
        sandboxId,
        st.template,
        snapshotId,
        { kind: "full", leaveRunning: true, wasPaused: st.state === "paused", memoryMib: st.memoryMib, timings, restoreAs: opts.restoreAs ?? [], diskMib: st.diskMib },
        signal,
      ),
    );
    timings.captureMs = ms(t0);
    return this.finish(meta, opts.upload, timings, signal).finally(() => void this.settle(snapshotId));
  }

  /**
   * `wasPaused`: the manager's view of the sandbox (it serialises lifecycle calls, so it is
   * the runtime's too) — one runtime call fewer on the fork path. A `disk` capture takes
   * only the read-only disk snapshot (atomic by itself: no freeze, nothing to thaw).
   */
  private async snapshot(
    sandboxId: string,
    template: string,
    snapshotId: string,
    {
      kind,
      leaveRunning,
      wasPaused,
      memoryMib,
      timings,
      restoreAs = [],
      diskMib = 0,
    }: { kind: SnapshotKind; leaveRunning: boolean; wasPaused: boolean; memoryMib: number; timings: Record<string, number>; restoreAs?: string[]; diskMib?: number },
    signal: AbortSignal,
  ): Promise<LocalMeta> {
    if (!SNAP.test(snapshotId)) throw new SpaceError("invalid_argument", `snapshot id ${snapshotId} is not valid`);
    const dir = this.localDir(snapshotId);
    const image = join(dir, "image");
    const rt = this.o.runtime;
    const t0 = performance.now();
    const freeze = kind === "full" && !wasPaused;
    let dumped = false;
    try {
      // The parent lookup (a btrfs process when the sandbox has no parent record) is needed
      // only for the meta at the end: it overlaps the whole capture. The directories and the
      // freeze must be done before the disk snapshot and the dump.
      const parentP = this.parentOf(sandboxId, template);
      parentP.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
      await Promise.all([
        rm(dir, { recursive: true, force: true })
          .then(() => mkdir(dir, { recursive: true }))
          .then(() => (kind === "full" ? this.stage(snapshotId, image, memoryMib) : undefined)),
        mkdir(join(this.cacheSnaps, snapshotId), { recursive: true }),
        freeze ? rt.pause(sandboxId, signal) : undefined,
      ]);
      timings.freezeMs = ms(t0);
      // The sandbox is stopped from here to the end of the capture: its disk usage holds (a
      // disk capture leaves it running: measured beside the snapshot, near enough for a quota
      // base). Measured after the snapshot: qgroups count a write at the transaction commit the
      // snapshot makes, not at the write's fsync, so a reading before it can miss recent writes.
      let diskBase: Promise<number | undefined> = Promise.resolve(undefined);
      const tDisk = performance.now();
      const snapshotDisk = () =>
        btrfs.snapshotReadonly(this.o.disks.sandboxPath(sandboxId), this.diskPath(snapshotId), signal, T).then(() => {
          timings.diskSnapshotMs = ms(tDisk);
          diskBase = this.capturedBaseMib(sandboxId, signal);
          diskBase.catch(() => undefined);
        });
      const dump = () =>
        this.cp.checkpoint(sandboxId, image, { leaveRunning, signal }).then((c) => {
          timings.dumpMs = ms(tDisk);
          return c;
        });
      let checkpoint: CheckpointMeta | undefined;
      if (kind === "disk") {
        await snapshotDisk();
      } else if (leaveRunning) {
        // Both of one instant: the source stays stopped through both (frozen by us, its tasks
        // held by CRIU while it dumps), so they run side by side; a failure of either leaves
        // it running. A suspend keeps the order: its dump ends the processes, so the disk
        // snapshot must have succeeded first.
        const d = dump();
        const disk = snapshotDisk();
        if (restoreAs.length && (this.o.keepMs ?? 0) > 0) this.prepare(sandboxId, snapshotId, restoreAs, { template, diskMib, disk: disk.then(() => diskBase) });
        await settleAll([disk, d]);
        checkpoint = await d;
      } else {
        await snapshotDisk();
        checkpoint = await dump();
      }
      if (checkpoint) {
        dumped = true;
        await writeMeta(image, checkpoint);
      }
      const parent = await parentP;
      const meta: LocalMeta = {
        snapshotId,
        sourceSandboxId: sandboxId,
        template,
        parentPath: parent.path,
        parentUuid: parent.uuid,
        ...(checkpoint ? { checkpoint } : {}),
        createdAt: new Date().toISOString(),
        diskBaseMib: await diskBase,
      };
      await this.writeLocalMeta(meta);
      return meta;
    } catch (e) {
      await this.dropLocal(snapshotId).catch(() => undefined);
      throw e;
    } finally {
      // A suspend's processes end with the dump. After a --leave-running dump CRIU puts back
      // the freezer state it found (frozen by us): thaw it without asking first. After a
      // failure it may or may not be frozen: check.
      if (freeze && !(dumped && !leaveRunning)) {
        const frozen = dumped || (await rt.state(sandboxId, AbortSignal.timeout(30_000)).catch(() => null))?.status === "paused";
        if (frozen) await rt.resume(sandboxId, AbortSignal.timeout(30_000)).catch(() => undefined);
      }
    }
  }

  /**
   * Sets up, beside a capture's dump, what each restore of it as one of `ids` here needs
   * before its runtime restore: a network slot with the source's egress policy, and the
   * disk made from the capture's disk snapshot once `disk` has it (with the size it
   * measured). Both are kept as a suspended sandbox's are (SPACE_NODE_SLOT_KEEP_MS): a
   * restore here takes them, and they go when none comes (the fork was placed elsewhere,
   * the capture failed). Best effort: a restore without them makes its own.
   */
  private prepare(sourceId: string, snapshotId: string, ids: string[], o: { template: string; diskMib: number; disk: Promise<number | undefined> }): void {
    const signal = AbortSignal.timeout(T);
    for (const id of ids) {
      const made: Promise<void> = settleAll([
        // After the disk snapshot, not beside it: its processes slowed the snapshot ~10 ms (2 cores).
        o.disk.then(() => this.o.manager.keepSlotLike(id, sourceId, signal)),
        o.disk.then((base) => this.o.disks.keepDiskFrom(id, snapshotId, this.diskPath(snapshotId), o.diskMib, () => this.restoredBaseMib(base, o.template), signal)),
      ])
        .then(
          () => undefined,
          (e: unknown) => this.o.logger.warn({ sandboxId: id, snapshotId, err: e }, "a fork's disk or network could not be made beside its capture; its restore makes them"),
        )
        .finally(() => {
          if (this.prepared.get(id) === made) this.prepared.delete(id);
        });
      this.prepared.set(id, made);
    }
  }

  /**
   * Publishes a local copy taken with `upload: false` (pause returns once the capture is
   * safe here; the control plane publishes behind it): the same parts, checksums and
   * encryption as an upload at capture time. Concurrent calls for one snapshot share one
   * upload; the copy is held against the reaper meanwhile.
   */
  publish(snapshotId: string, signal: AbortSignal): Promise<SnapshotDescriptor> {
    if (!SNAP.test(snapshotId)) throw new SpaceError("invalid_argument", `snapshot id ${snapshotId} is not valid`);
    if (!this.o.blob) throw new SpaceError("failed_precondition", `snapshot ${snapshotId} cannot be published: this node has no blob store`);
    const running = this.publishing.get(snapshotId);
    if (running) return running.done;
    this.users.set(snapshotId, (this.users.get(snapshotId) ?? 0) + 1);
    const abort = new AbortController();
    const sig = AbortSignal.any([signal, abort.signal]);
    const p = (async () => {
      const meta = await readFile(join(this.localDir(snapshotId), "meta.json"), "utf8").then((t) => JSON.parse(t) as LocalMeta, () => undefined);
      if (!meta || !(await exists(this.diskPath(snapshotId)))) throw new SpaceError("not_found", `snapshot ${snapshotId} has no local copy on this node`);
      return this.finish(meta, true, {}, sig, signal);
    })().finally(() => {
      this.publishing.delete(snapshotId);
      const n = (this.users.get(snapshotId) ?? 1) - 1;
      if (n > 0) this.users.set(snapshotId, n);
      else this.users.delete(snapshotId);
    });
    this.publishing.set(snapshotId, { done: p, abort });
    return p;
  }

  /** `parentSignal`: the template parent's upload is shared by every snapshot of it, so only the caller's own signal may stop it. */
  private async finish(meta: LocalMeta, upload: boolean, timings: Record<string, number>, signal: AbortSignal, parentSignal = signal): Promise<SnapshotDescriptor> {
    const desc: SnapshotDescriptor = {
      snapshotId: meta.snapshotId,
      sourceSandboxId: meta.sourceSandboxId,
      template: meta.template,
      kind: meta.checkpoint ? "full" : "disk",
      parentUuid: meta.parentUuid,
      parts: [],
      sizeBytes: 0,
      ...(meta.diskBaseMib !== undefined ? { diskBaseMib: meta.diskBaseMib } : {}),
      timings,
    };
    if (!upload || !this.o.blob) return desc;
    const t0 = performance.now();
    const blob = this.o.blob;
    const dataKey = this.o.clusterKey ? newDataKey() : undefined;
    if (dataKey) desc.wrappedKey = wrapKey(this.o.clusterKey!, dataKey);
    const ext = dataKey ? ".enc" : "";
    await this.publishParent(meta.parentPath, meta.parentUuid, parentSignal);
    const put = async (kind: "memory" | "disk", stored: Promise<BlobPart>) => {
      const part = await stored;
      desc.parts.push({ kind, ...part });
      desc.sizeBytes += part.sizeBytes;
    };
    const base = `snapshots/${meta.snapshotId}`;
    const memoryKey = `${base}/${MEMORY_PART}${ext}`;
    // Settled, not raced: after a failure (or a drop's abort) no tar or send of the copy still runs.
    await settleAll([
      meta.checkpoint
        ? put("memory", this.packMemory(meta.snapshotId, (file) => putFile(blob, memoryKey, file, dataKey, signal), signal))
        : Promise.resolve(),
      put("disk", putSubvolume(blob, `${base}/disk.btrfs${ext}`, this.diskPath(meta.snapshotId), { parent: meta.parentPath, dataKey }, signal)),
    ]);
    desc.parts.sort((a, b) => a.kind.localeCompare(b.kind));
    await this.writeLocalMeta({ ...meta, durable: true });
    timings.uploadMs = ms(t0);
    return desc;
  }

  /**
   * The CRIU image packed into one compressed file beside it, handed to `use`, then removed.
   * A file, not a pipe: libarchive pads what it writes to a pipe to whole blocks after the
   * zstd frame, and then cannot read it back.
   */
  private async packMemory<T>(snapshotId: string, use: (file: string) => Promise<T>, signal: AbortSignal): Promise<T> {
    const dir = this.localDir(snapshotId);
    const file = join(dir, `${MEMORY_PART}.${randomBytes(4).toString("hex")}`);
    try {
      await exec(PACK[0]!, [...PACK.slice(1), "-C", join(dir, "image"), "-cf", file, "."], { timeoutMs: T, signal });
      return await use(file);
    } finally {
      await rm(file, { force: true });
    }
  }

  /**
   * A full send stream of the parent, once per parent identity; encrypted like the
   * snapshot parts when the node has a cluster key (a private template's files are
   * tenant data too).
   */
  private publishParent(path: string, uuid: string, signal: AbortSignal): Promise<void> {
    const running = this.publishingParents.get(uuid);
    if (running) return running;
    const p = this.putParent(path, uuid, signal).finally(() => this.publishingParents.delete(uuid));
    this.publishingParents.set(uuid, p);
    return p;
  }

  private async putParent(path: string, uuid: string, signal: AbortSignal): Promise<void> {
    const blob = this.o.blob!;
    const clusterKey = this.o.clusterKey;
    if (clusterKey ? await blob.head(parentRecordKey(uuid), signal) : await blob.head(`parents/${uuid}.btrfs`, signal)) return;
    const key = clusterKey ? `parents/${uuid}.btrfs.enc` : `parents/${uuid}.btrfs`;
    const dataKey = clusterKey ? newDataKey() : undefined;
    const info = await putSubvolume(blob, key, path, { dataKey }, signal);
    if (dataKey) {
      const rec: ParentRecord = { key, sizeBytes: info.sizeBytes, sha256: info.sha256, wrappedKey: wrapKey(clusterKey!, dataKey) };
      await blob.put(parentRecordKey(uuid), Buffer.from(JSON.stringify(rec)), signal);
    }
  }

  // ------------------------------------------------------------------ restore

  /**
   * Restores `desc` as sandbox `spec.sandboxId` (a new id for forks): from the local copy
   * when this node has it, else from the blob store (checksums verified before use, the
   * parent fetched when missing, refused when it cannot be found).
   */
  async restore(spec: SandboxSpec, desc: SnapshotDescriptor, signal: AbortSignal, o: RestoreOptions = {}): Promise<SandboxStatus> {
    const id = desc.snapshotId;
    for (let r = this.reaping.get(id); r; r = this.reaping.get(id)) await r;
    this.users.set(id, (this.users.get(id) ?? 0) + 1);
    try {
      return await this.restoreHeld(spec, desc, signal, o);
    } finally {
      const n = (this.users.get(id) ?? 1) - 1;
      if (n > 0) this.users.set(id, n);
      else this.users.delete(id);
    }
  }

  private async restoreHeld(spec: SandboxSpec, desc: SnapshotDescriptor, signal: AbortSignal, o: RestoreOptions): Promise<SandboxStatus> {
    const t0 = performance.now();
    // A fork whose disk and slot its capture is still making: take them once made.
    await this.prepared.get(spec.sandboxId);
    const fetched = await this.ensureLocal(desc, signal);
    // Last use, for the reaper's idle rule and least-recently-used order.
    const now = new Date();
    await utimes(join(this.localDir(desc.snapshotId), "meta.json"), now, now).catch(() => undefined);
    const fetchMs = ms(t0);
    const meta = JSON.parse(await readFile(join(this.localDir(desc.snapshotId), "meta.json"), "utf8")) as LocalMeta;
    const id = spec.sandboxId;
    const image = join(this.localDir(desc.snapshotId), "image");
    const checkpoint = meta.checkpoint;
    if (desc.kind === "full" && !checkpoint) throw new SpaceError("failed_precondition", `snapshot ${desc.snapshotId} has no memory image on this node`);
    const st = await this.o.manager.create(spec, signal, {
      disk: async (sig) => {
        const root = this.o.disks.sandboxRoot(id);
        // The disk its suspend here left a moment ago equals the snapshot's: no new snapshot.
        // (So is a fork's its capture made.)
        if (await this.o.disks.takeKeptDisk(id, desc.snapshotId, sig)) return { root, limited: Promise.resolve() };
        // The limit lands while the runtime restores (the manager awaits it before `running`
        // and releases the disk when it fails), as a created disk's does.
        return this.o.disks.sandboxDiskFrom(id, this.diskPath(desc.snapshotId), spec.diskMib, () => this.restoredBaseMib(meta.diskBaseMib, meta.template), sig, { warm: o.warmDisks });
      },
      ...(o.beforeNetwork ? { beforeNetwork: true } : {}),
      // A disk snapshot (or a restore asked for as one: E2B's connect with `memory: false`) boots fresh.
      ...(checkpoint && desc.kind === "full" ? { start: (cid: string, sig: AbortSignal) => this.cp.restore(cid, image, checkpoint, sig) } : {}),
      sourceSandboxId: desc.sourceSandboxId,
    });
    await this.o.disks.writeNote(id, "parent", JSON.stringify({ path: meta.parentPath, uuid: meta.parentUuid }));
    const fetchPhases = Object.fromEntries(Object.entries(fetched).map(([k, v]) => [`fetch.${k}`, v]));
    return { ...st, timings: { ...(st.timings ?? {}), ...fetchPhases, fetchMs, restoreTotalMs: ms(t0) } };
  }

  /** What a disk restored from a snapshot starts from (Disks.limitSandboxDisk): its captured size, else its template's. */
  private async restoredBaseMib(diskBaseMib: number | undefined, template: string): Promise<number> {
    return diskBaseMib ?? (await this.o.disks.templateInfo(template))?.rootfsSizeMib ?? 0;
  }

  /** Under simple quotas, a captured disk's whole size: the sandbox's base plus what it wrote. */
  private async capturedBaseMib(sandboxId: string, signal: AbortSignal): Promise<number | undefined> {
    if (this.o.disks.cache.quotaMode === "classic") return undefined;
    const u = await this.o.disks.usage(sandboxId, signal);
    return u && Math.ceil(u.referencedBytes / 1048576);
  }

  async hasLocal(snapshotId: string): Promise<boolean> {
    return (await exists(join(this.localDir(snapshotId), "meta.json"))) && (await exists(this.diskPath(snapshotId)));
  }

  /** The fetch's phases (ms) when this call fetched it; {} when the copy was here or another restore fetched it. */
  private async ensureLocal(desc: SnapshotDescriptor, signal: AbortSignal): Promise<Record<string, number>> {
    if (await this.hasLocal(desc.snapshotId)) return {};
    const running = this.fetching.get(desc.snapshotId);
    if (running) return running.then(() => ({}));
    const p = this.fetch(desc, signal).finally(() => this.fetching.delete(desc.snapshotId));
    this.fetching.set(desc.snapshotId, p);
    return p;
  }

  private async fetch(desc: SnapshotDescriptor, signal: AbortSignal): Promise<Record<string, number>> {
    const timings: Record<string, number> = {};
    const blob = this.o.blob;
    if (!blob) throw new SpaceError("failed_precondition", `snapshot ${desc.snapshotId} is not on this node and the node has no blob store`);
    // The memory part whenever it was published, even for a restore asked for as `disk`: the local copy is the snapshot's, whole.
    const mem = desc.parts.find((p) => p.kind === "memory");
    const disk = desc.parts.find((p) => p.kind === "disk");
    if ((desc.kind === "full" && !mem) || !disk) throw new SpaceError("failed_precondition", `snapshot ${desc.snapshotId} is not durable (its parts are not in the blob store)`);
    let dataKey: Buffer | undefined;
    if (desc.wrappedKey) {
      if (!this.o.clusterKey) throw new SpaceError("failed_precondition", `snapshot ${desc.snapshotId} is encrypted and this node has no SPACE_ENCRYPTION_KEY`);
      dataKey = unwrapKey(this.o.clusterKey, desc.wrappedKey, this.o.previousKey);
    }
    const dir = this.localDir(desc.snapshotId);
    await rm(dir, { recursive: true, force: true });
    await mkdir(mem ? join(dir, "image") : dir, { recursive: true });
    const scratch = join(this.o.nodeDir, "snapshots", `.dl-${desc.snapshotId}`);
    await mkdir(scratch, { recursive: true });
    try {
      // 1. Both parts downloaded and checked before anything is unpacked, and meanwhile the
      //    parent of the disk stream: present, or received from the blob store, or refused.
      //    All settle before anything fails (the parent receive may serve other restores).
      const memFile = join(scratch, "memory");
      const diskFile = join(scratch, "disk");
      const t0 = performance.now();
      await settleAll([
        mem ? this.download(mem, memFile, signal).then(() => (timings.downloadMemoryMs = ms(t0))) : Promise.resolve(),
        this.download(disk, diskFile, signal).then(() => (timings.downloadDiskMs = ms(t0))),
        this.ensureParent(desc.parentUuid, scratch, signal).then(() => (timings.parentMs = ms(t0))),
      ]);
      const t1 = performance.now();
      // 2. Unpack both at once (decrypting: a failed tag aborts the pipeline, and the partial result is dropped).
      const target = join(this.cacheSnaps, desc.snapshotId);
      await btrfs.subvolumeDelete(join(target, "disk")).catch(() => undefined);
      await mkdir(target, { recursive: true });
      await settleAll([
        mem ? pipeInto(openSealed(memFile, mem.key, dataKey), [...UNPACK, "-C", join(dir, "image")], signal) : Promise.resolve(),
        receiveSubvolume(diskFile, disk.key, dataKey, target, signal),
      ]).catch(async (e: unknown) => {
        await btrfs.subvolumeDelete(join(target, "disk")).catch(() => undefined);
        throw e;
      });
      timings.unpackMs = ms(t1);
      const t2 = performance.now();
      // A received disk owns only what it changed from its parent: its whole size is the
      // source's measure when the descriptor carries it, else the tree walked (seconds on a large disk).
      const diskBaseMib = this.o.disks.cache.quotaMode === "simple" ? (desc.diskBaseMib ?? (await treeSizeMib(join(target, "disk"), signal))) : undefined;
      timings.measureMs = ms(t2);
      const t3 = performance.now();
      const parentPath = await this.findParent(desc.parentUuid);
      timings.findParentMs = ms(t3);
      const checkpoint = mem ? ((JSON.parse(await readFile(join(dir, "image", "space-checkpoint.json"), "utf8").catch(() => "null")) as CheckpointMeta | null) ?? NO_LOG) : undefined;
      const meta: LocalMeta = {
        snapshotId: desc.snapshotId,
        sourceSandboxId: desc.sourceSandboxId,
        template: desc.template,
        parentPath: parentPath ?? "",
        parentUuid: desc.parentUuid,
        ...(checkpoint ? { checkpoint } : {}),
        createdAt: new Date().toISOString(),
        durable: true,
        diskBaseMib,
      };
      await this.writeLocalMeta(meta);
      this.o.logger.info({ snapshotId: desc.snapshotId, timings }, "snapshot fetched from the blob store");
      return timings;
    } catch (e) {
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      throw e;
    } finally {
      await rm(scratch, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  /** Downloads a part to `file`, refusing it when its sha256 or size differs from the descriptor. */
  private async download(part: SnapshotPartInfo, file: string, signal: AbortSignal): Promise<void> {
    await downloadVerified(this.o.blob!, part, file, signal);
  }

  private async findParent(uuid: string): Promise<string | undefined> {
    const mnt = this.o.disks.cache.mountPath;
    const found = (await btrfs.listReceivedSubvolumes(mnt)).find((v) => v.receivedUuid === uuid || v.uuid === uuid);
    return found && join(mnt, found.path);
  }

  private async ensureParent(uuid: string, scratch: string, signal: AbortSignal): Promise<void> {
    const running = this.receivingParents.get(uuid);
    if (running) return running;
    const p = this.receiveParent(uuid, scratch, signal).finally(() => this.receivingParents.delete(uuid));
    this.receivingParents.set(uuid, p);
    return p;
  }

  private async receiveParent(uuid: string, scratch: string, signal: AbortSignal): Promise<void> {
    if (await this.findParent(uuid)) return;
    const blob = this.o.blob!;
    const plainKey = `parents/${uuid}.btrfs`;
    const rec = await readParentRecord(blob, uuid, signal);
    const head = rec ? undefined : await blob.head(plainKey, signal);
    if (!rec && !head) {
      throw new SpaceError(
        "failed_precondition",
        `the disk stream's parent subvolume ${uuid} is neither on this node nor in the blob store (${plainKey}[.enc]): refusing to restore without it`,
        { details: { parentUuid: uuid, reason: "parent_missing" } },
      );
    }
    let dataKey: Buffer | undefined;
    if (rec) {
      if (!this.o.clusterKey) throw new SpaceError("failed_precondition", `the parent subvolume ${uuid} is encrypted and this node has no SPACE_ENCRYPTION_KEY`);
      dataKey = unwrapKey(this.o.clusterKey, rec.wrappedKey, this.o.previousKey);
    }
    const part: SnapshotPartInfo = rec ? { kind: "disk", key: rec.key, sizeBytes: rec.sizeBytes, sha256: rec.sha256 } : { kind: "disk", key: plainKey, sizeBytes: head!.sizeBytes, sha256: head!.sha256 };
    const file = join(scratch, "parent");
    const dir = join(this.cacheSnaps, "parents", uuid);
    await mkdir(dir, { recursive: true });
    await fetchSubvolume(blob, part, file, dir, dataKey, signal).catch(async (e: unknown) => {
      await rm(dir, { recursive: true, force: true }).catch(() => undefined);
      throw e;
    });
    this.o.logger.info({ parentUuid: uuid, encrypted: Boolean(rec) }, "snapshot parent received from the blob store");
  }

  /**
   * Frees the local copy (memory image and disk snapshot). Absent = ok. A publication of it
   * still running is stopped first: btrfs refuses to delete a subvolume while it is being
   * sent, and a dropped snapshot's upload has no reader.
   */
  async dropLocal(snapshotId: string): Promise<void> {
    if (!SNAP.test(snapshotId)) throw new SpaceError("invalid_argument", `snapshot id ${snapshotId} is not valid`);
    const publishing = this.publishing.get(snapshotId);
    if (publishing) {
      publishing.abort.abort(new SpaceError("not_found", `snapshot ${snapshotId} was dropped while it was being published`));
      await publishing.done.catch(() => undefined);
    }
    // A move of its staged image to disk stops first: its copy must not write into what is removed.
    const staged = this.staged.get(snapshotId);
    if (staged?.settled) {
      staged.cancel?.abort();
      await staged.settled;
    }
    this.o.disks.warmFrom.drop(this.diskPath(snapshotId));
    await btrfs.subvolumeDelete(this.diskPath(snapshotId)).catch(() => undefined);
    await rm(join(this.cacheSnaps, snapshotId), { recursive: true, force: true });
    await rm(this.localDir(snapshotId), { recursive: true, force: true });
    await this.unstage(snapshotId);
  }

  // ------------------------------------------------------------------ staging

  private stagingPath(snapshotId: string): string {
    return join(this.o.staging!.dir, snapshotId);
  }

  /**
   * Points `image` at a staging dir when the budget and the tmpfs's free space hold the
   * sandbox's memory limit (what its image can hold at most); else the dump goes to disk.
   * Reserved in the same synchronous step as the check, so concurrent captures never
   * overrun the budget.
   */
  private async stage(snapshotId: string, image: string, memoryMib: number): Promise<void> {
    const budget = this.o.staging?.budgetMib ?? 0;
    if (budget <= 0) return;
    // The tmpfs may be smaller than the budget (a container's /dev/shm is often 64 MiB).
    const root = this.o.staging!.dir;
    if (!(await this.stagingRootSafe(root))) return;
    const freeMib = await statfs(root).then((f) => (f.bavail * f.bsize) / 1048576, () => 0);
    let held = 0;
    for (const s of this.staged.values()) held += s.mib;
    if (held + memoryMib > Math.min(budget, freeMib)) return;
    this.staged.set(snapshotId, { mib: memoryMib });
    const dir = this.stagingPath(snapshotId);
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await symlink(dir, image);
  }

  /**
   * The staging root sits in a shared tmpfs (/dev/shm) under a name others can guess: used
   * only when it is a real directory of this process's user that no one else can open, so
   * that no other user can place it, link it elsewhere, or read a sandbox's memory there.
   */
  private async stagingRootSafe(root: string): Promise<boolean> {
    await mkdir(root, { recursive: true, mode: 0o700 }).catch(() => undefined);
    const st = await lstat(root).catch(() => undefined);
    const ok = !!st && st.isDirectory() && st.uid === process.getuid?.() && (st.mode & 0o077) === 0;
    if (!ok && !this.unsafeRootLogged) {
      this.unsafeRootLogged = true;
      this.o.logger.warn({ dir: root }, "the snapshot staging dir is not a private directory of this user: memory images are dumped to disk");
    }
    return ok;
  }

  /**
   * Moves a staged image to disk behind the answer (its memory is held until then), after
   * SETTLE_AFTER_MS: the publication and a restore at once read the staged copy without the
   * copy's disk writes competing with them. Copied beside it, then swapped in when no
   * restore or publication reads it, in one synchronous step with that check (a reader
   * resolves the path after it, so it reads one or the other). A failed move leaves the
   * staged copy, still counted against the budget, for the next start to move.
   */
  private settle(snapshotId: string): Promise<void> {
    const s = this.staged.get(snapshotId);
    if (!s) return Promise.resolve();
    const cancel = (s.cancel ??= new AbortController());
    return (s.settled ??= (async () => {
      const image = join(this.localDir(snapshotId), "image");
      const next = `${image}.settling`;
      const canceled = new Promise<void>((r) => cancel.signal.addEventListener("abort", () => r(), { once: true }));
      try {
        await Promise.race([new Promise((r) => setTimeout(r, SETTLE_AFTER_MS).unref()), this.stopping, canceled]);
        cancel.signal.throwIfAborted();
        await rm(next, { recursive: true, force: true });
        await exec("nice", ["-n", "19", "cp", "-a", "--", this.stagingPath(snapshotId), next], { timeoutMs: T, signal: cancel.signal });
        while (this.users.has(snapshotId)) {
          cancel.signal.throwIfAborted();
          await new Promise((r) => setTimeout(r, 20));
        }
        unlinkSync(image);
        renameSync(next, image);
        await this.unstage(snapshotId);
      } catch (e) {
        await rm(next, { recursive: true, force: true }).catch(() => undefined);
        // Canceled by a drop (dropLocal), which frees the rest.
        if (cancel.signal.aborted) return;
        // Dropped meanwhile: nothing to keep.
        if (!(await exists(join(this.localDir(snapshotId), "meta.json")))) await this.unstage(snapshotId);
        else this.o.logger.warn({ snapshotId, err: e }, "moving a staged memory image to disk failed; the next start retries");
      }
    })());
  }

  private async unstage(snapshotId: string): Promise<void> {
    if (!this.o.staging) return;
    this.staged.delete(snapshotId);
    await rm(this.stagingPath(snapshotId), { recursive: true, force: true });
  }

  /**
   * At start: images a previous process staged are moved to disk; a copy whose staged image
   * is gone (the host restarted: a tmpfs does not survive it) is dropped, as a lost local
   * copy (a durable snapshot is fetched again); staging dirs of no local copy are removed.
   */
  async recoverStaged(): Promise<void> {
    const st = this.o.staging;
    if (!st) return;
    const ids = (await readdir(join(this.o.nodeDir, "snapshots")).catch(() => [] as string[])).filter((n) => SNAP.test(n));
    for (const id of ids) {
      const image = join(this.localDir(id), "image");
      if (!(await lstat(image).catch(() => undefined))?.isSymbolicLink()) continue;
      if (await exists(join(this.stagingPath(id), "."))) {
        this.staged.set(id, { mib: await treeSizeMib(this.stagingPath(id), AbortSignal.timeout(60_000)).catch(() => 0) });
        await this.settle(id);
      } else {
        this.o.logger.warn({ snapshotId: id }, "a staged memory image did not survive the host's restart: the local copy is dropped");
        await this.dropLocal(id);
      }
    }
    for (const n of await readdir(st.dir).catch(() => [] as string[])) if (SNAP.test(n) && !ids.includes(n)) await rm(join(st.dir, n), { recursive: true, force: true });
  }

  /** Moves every staged image to disk at once (a stop leaves nothing in the host's memory). */
  async stop(): Promise<void> {
    this.stopNow();
    await Promise.all([...this.staged.keys()].map((id) => this.settle(id)));
    // Empty unless a move failed (kept for the next start): no empty dir left in the host's tmpfs.
    if (this.o.staging) await rmdir(this.o.staging.dir).catch(() => undefined);
  }

  /** Complete local copies (a capture or fetch in progress has no meta.json yet): the reaper's view. */
  async listLocal(): Promise<LocalSnapshot[]> {
    const out: LocalSnapshot[] = [];
    for (const n of await readdir(join(this.o.nodeDir, "snapshots")).catch(() => [] as string[])) {
      if (!SNAP.test(n)) continue;
      const file = join(this.localDir(n), "meta.json");
      const [meta, st] = await Promise.all([readFile(file, "utf8").then((t) => JSON.parse(t) as LocalMeta, () => undefined), stat(file).catch(() => undefined)]);
      if (!meta || !st) continue;
      out.push({ snapshotId: n, createdAt: meta.createdAt ? new Date(meta.createdAt) : st.ctime, lastUsedAt: st.mtime, durable: meta.durable === true, inUse: this.users.has(n) || this.fetching.has(n) });
    }
    return out;
  }

  /**
   * Frees a local copy unless a restore uses it (checked and marked in one synchronous
   * step, so a restore starting now waits for the reap and then fetches from the blob
   * store). Returns whether it was freed.
   */
  async reap(snapshotId: string): Promise<boolean> {
    if (this.users.has(snapshotId) || this.fetching.has(snapshotId) || this.reaping.has(snapshotId)) return false;
    const p = this.dropLocal(snapshotId).finally(() => this.reaping.delete(snapshotId));
    this.reaping.set(snapshotId, p);
    await p;
    return true;
  }

  private async writeLocalMeta(meta: LocalMeta): Promise<void> {
    await writeFile(join(this.localDir(meta.snapshotId), "meta.json"), JSON.stringify(meta));
  }
}

/** What marks an encrypted parent stream published: where it is, its checksum and its wrapped data key. */
interface ParentRecord {
  key: string;
  sizeBytes: number;
  sha256: string;
  wrappedKey: string;
}

const parentRecordKey = (uuid: string) => `parents/${uuid}.json`;

async function readParentRecord(blob: BlobStore, uuid: string, signal: AbortSignal): Promise<ParentRecord | undefined> {
  if (!(await blob.head(parentRecordKey(uuid), signal))) return undefined;
  const chunks: Buffer[] = [];
  for await (const c of await blob.get(parentRecordKey(uuid), signal)) chunks.push(c as Buffer);
  const rec = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Partial<ParentRecord>;
  if (typeof rec.key !== "string" || typeof rec.sha256 !== "string" || typeof rec.wrappedKey !== "string" || typeof rec.sizeBytes !== "number") {
    throw new SpaceError("failed_precondition", `${parentRecordKey(uuid)} in the blob store is damaged`);
  }
  return rec as ParentRecord;
}

const ms = (t: number) => Math.round((performance.now() - t) * 10) / 10;
