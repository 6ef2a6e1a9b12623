/**
 * Capture after boot: a cold create of a template that has no capture of its own (after
 * ready, capture.ts) restores a checkpoint of that template booted and idle on this node
 * instead of booting it: CRIU brings envd back listening, its code already compiled, and
 * envd's /init gives it the sandbox's env vars and token. This is how E2B creates
 * sandboxes (a booted template's snapshot resumed), and here it spends less CPU than a boot.
 *
 * The checkpoint is this node's alone (never published: it is tied to this node's envd
 * build, Node.js, kernel and CAs, the `identity` below) and is made behind the first cold
 * create of the template that finds none, at background priority; until it exists creates
 * boot as before. It is dropped when its template is removed or re-pointed here, when the
 * template or the node's identity changed, and when a restore from it failed (that create
 * boots instead).
 */
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { cpus, release } from "node:os";
import { join } from "node:path";
import { newExecutionId, newSandboxId, randomId } from "../../core/ids.ts";
import { ENVD_PORT, type SandboxSpec, type SandboxStatus } from "../../contract/node-api.ts";
import { SnapshotDescriptor } from "../../contract/snapshot-descriptor.ts";
import type { TemplateInfo } from "../disk/disks.ts";
import { succeedsOnce } from "../sandboxes/template-boot.ts";
import { restoreCaptured, type CaptureDeps } from "./capture.ts";

export interface BootCaptureOptions {
  deps: CaptureDeps;
  /** Where each template's record (`<name>.json`: its key and snapshot) is kept. */
  dir: string;
  /** What a checkpoint made on this node depends on besides its template (`nodeIdentity`). */
  identity: string;
}

/** A template whose checkpoint could not be made is not tried again for this long (each try boots a sandbox). */
const FAILED_RETRY_MS = 10 * 60_000;
/** Commands a capture runs before its checkpoint (one: a restored envd's next costs ~40% more CPU; three: +0.2 MB of memory). */
const WARM_UP_COMMANDS = 3;

interface BootCaptureRecord {
  key: string;
  snapshot: SnapshotDescriptor;
}

/**
 * The node's side of a checkpoint's key: the files a booted envd is made of (its bundle
 * and startup snapshot, the Node.js binary, CRIU) by size and modification time, the
 * kernel and CPU (CRIU's images hold both), and anything else given (CAs, envd's knobs).
 */
export async function nodeIdentity(files: readonly string[], values: readonly string[]): Promise<string> {
  const h = createHash("sha256");
  for (const f of files) {
    const s = await stat(f).catch(() => undefined);
    h.update(`${f}\0${s ? `${s.size}:${s.mtimeMs}:${s.ino}` : "absent"}\0`);
  }
  h.update(`${release()}\0${cpus()[0]?.model ?? ""}\0`);
  for (const v of values) h.update(`${v}\0`);
  return h.digest("hex");
}

export class BootCaptures {
  readonly #o: BootCaptureOptions;
  readonly #records = new Map<string, BootCaptureRecord | undefined>();
  readonly #making = new Map<string, Promise<void>>();
  /** Keys whose checkpoint could not be made, and when: not tried again before FAILED_RETRY_MS. */
  readonly #failed = new Map<string, number>();
  readonly #stopping = new AbortController();

  constructor(o: BootCaptureOptions) {
    this.#o = o;
  }

  /** Whether `spec` may come from its template's capture after boot: it binds no volumes (the checkpoint's mounts are the template's alone). */
  eligible(spec: SandboxSpec): boolean {
    return !spec.volumes?.length;
  }

  /**
   * `spec` restored from its template's checkpoint; undefined = there is none yet (one is
   * made behind this create) or the restore failed (dropped; the caller boots).
   */
  async restore(spec: SandboxSpec, info: TemplateInfo, signal: AbortSignal): Promise<SandboxStatus | undefined> {
    const key = this.#key(info);
    const rec = await this.#record(info.name);
    if (!rec || rec.key !== key) {
      this.#make(info, key);
      return undefined;
    }
    return restoreCaptured(this.#o.deps, spec, rec.snapshot, signal, { warmDisks: true, beforeNetwork: true, onFailure: () => this.drop(info.name, rec) });
  }

  /** Forgets template `name`'s checkpoint and frees its copy (its template was removed or re-pointed). */
  async drop(name: string, only?: BootCaptureRecord): Promise<void> {
    const rec = await this.#record(name);
    if (!rec || (only && rec !== only)) return;
    this.#records.set(name, undefined);
    await rm(this.#file(name), { force: true });
    await this.#o.deps.snapshots.dropLocal(rec.snapshot.snapshotId).catch((e: unknown) =>
      this.#o.deps.logger.warn({ template: name, snapshotId: rec.snapshot.snapshotId, err: e }, "dropping a capture after boot's copy failed"),
    );
  }

  /** Drops the checkpoints of templates this node no longer has (after the cache's recovery). */
  async prune(templates: ReadonlySet<string>): Promise<void> {
    const names = (await readdir(this.#o.dir).catch(() => [] as string[])).filter((n) => n.endsWith(".json")).map((n) => n.slice(0, -5));
    for (const name of names) if (!templates.has(name)) await this.drop(name);
  }

  /** Stops checkpoints being made and waits for them. */
  async close(): Promise<void> {
    this.#stopping.abort();
    await Promise.allSettled(this.#making.values());
  }

  /** A checkpoint depends on its template's build and on this node's identity (a digest already: nothing to hash per create). */
  #key(info: TemplateInfo): string {
    const digest = (info as { digest?: unknown }).digest;
    return JSON.stringify([this.#o.identity, info.name, info.source, info.importedAt, typeof digest === "string" ? digest : ""]);
  }

  #file(name: string): string {
    return join(this.#o.dir, `${name}.json`);
  }

  async #record(name: string): Promise<BootCaptureRecord | undefined> {
    if (this.#records.has(name)) return this.#records.get(name);
    const raw = await readFile(this.#file(name), "utf8").catch(() => undefined);
    let rec: BootCaptureRecord | undefined;
    try {
      const j = raw ? (JSON.parse(raw) as { key?: unknown; snapshot?: unknown }) : undefined;
      const snapshot = SnapshotDescriptor.safeParse(j?.snapshot);
      if (typeof j?.key === "string" && snapshot.success) rec = { key: j.key, snapshot: snapshot.data };
    } catch {
      rec = undefined; // an unreadable record is as good as none: made again
    }
    this.#records.set(name, rec);
    return rec;
  }

  /** Makes template `info`'s checkpoint behind the create that found none (once at a time per template). */
  #make(info: TemplateInfo, key: string): void {
    if (this.#making.has(info.name) || this.#stopping.signal.aborted) return;
    if (Date.now() - (this.#failed.get(key) ?? -Infinity) < FAILED_RETRY_MS) return;
    const p = this.#capture(info, key)
      .catch((e: unknown) => {
        if (this.#stopping.signal.aborted) return;
        this.#failed.set(key, Date.now());
        this.#o.deps.logger.warn({ template: info.name, err: e }, `making the template's capture after boot failed; its creates boot (tried again in ${FAILED_RETRY_MS / 60_000} min)`);
      })
      .finally(() => this.#making.delete(info.name));
    this.#making.set(info.name, p);
  }

  async #capture(info: TemplateInfo, key: string): Promise<void> {
    const d = this.#o.deps;
    const signal = AbortSignal.any([this.#stopping.signal, AbortSignal.timeout(5 * 60_000)]);
    const t0 = Date.now();
    const spec: SandboxSpec = {
      sandboxId: newSandboxId(),
      executionId: newExecutionId(),
      template: info.name,
      vcpu: 1,
      memoryMib: 512,
      diskMib: Math.max(1024, info.rootfsSizeMib + 512),
      envVars: {},
      allowInternetAccess: false,
      // Nobody waits for it: booted behind the node's creates, at low CPU priority.
      background: true,
    };
    await d.manager.create(spec, signal);
    let snapshot: SnapshotDescriptor;
    try {
      // Commands first, as the SDK runs them: the checkpoint holds envd's code for them compiled
      // and its feedback gathered. A restored envd's next command then costs about half the CPU
      // it did after one command in the binary format (docs/hot-path.md).
      const envd = d.manager.target(spec.sandboxId, ENVD_PORT);
      for (let i = 0; i < WARM_UP_COMMANDS; i++) await succeedsOnce(envd.host, envd.port, undefined, "true", signal);
      snapshot = await d.snapshots.capture(spec.sandboxId, `sn_${randomId(16)}`, { upload: false }, signal);
    } finally {
      await d.manager.kill(spec.sandboxId, AbortSignal.timeout(60_000)).catch(() => undefined);
    }
    const now = await d.disks.templateInfo(info.name);
    if (!now || this.#key(now) !== key) {
      // Removed or re-pointed meanwhile: the checkpoint is of a build that is gone.
      await d.snapshots.dropLocal(snapshot.snapshotId).catch(() => undefined);
      return;
    }
    const old = await this.#record(info.name);
    await mkdir(this.#o.dir, { recursive: true });
    const tmp = join(this.#o.dir, `.${info.name}-${randomId(6)}`);
    await writeFile(tmp, JSON.stringify({ key, snapshot } satisfies BootCaptureRecord));
    await rename(tmp, this.#file(info.name));
    this.#records.set(info.name, { key, snapshot });
    if (old) await d.snapshots.dropLocal(old.snapshot.snapshotId).catch(() => undefined);
    d.logger.info({ template: info.name, snapshotId: snapshot.snapshotId, ms: Date.now() - t0 }, "template captured after boot: its cold creates restore it");
  }
}
