/**
 * template-manager, distribution side: the node's template cache against the blob store
 * catalog. A finished build is published (a full `btrfs send` of its read-only subvolume,
 * content-addressed by the build digest, encrypted under a per-stream data key when the
 * node has SPACE_ENCRYPTION_KEY); a node that lacks a template pulls it on demand (create,
 * restore) and prefetches the newest builds of every template; an LRU eviction keeps the
 * cache under its target without touching a template a sandbox uses, a GC drops what the
 * catalog deleted after a grace, and a startup recovery decides per entry what to keep,
 * finish, re-pull or drop (RECOVERY below).
 *
 * Blob store:
 *   templates/streams/<hex>.btrfs[.enc]  the send stream (hex = the build digest)
 *   templates/streams/<hex>.json         its size, sha256 and wrapped data key
 *   templates/builds/<name>.json         TemplateManifest: a build (its stream, its metadata)
 *   templates/aliases/<alias>.json       AliasManifest: the builds an alias pointed at, newest first
 *
 * Node cache: <templates>/<name> (read-only subvolume) + <name>.json (metadata, whose mtime
 * is the last use); a pull receives into <templates>/.pull-<name>/ (its presence marks a
 * partial pull) and snapshots the result into place, so a stream sent under another
 * build's name lands under the name asked for.
 */
import { lstat, mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import type { BlobStore } from "../../blob/blob-store.ts";
import { newDataKey, unwrapKey, wrapKey } from "../../core/envelope.ts";
import { invalid, SpaceError } from "../../core/errors.ts";
import { randomId } from "../../core/ids.ts";
import type { Logger } from "../../core/log.ts";
import * as btrfs from "../disk/btrfs.ts";
import type { Disks, TemplateInfo } from "../disk/disks.ts";
import { fetchSubvolume, putSubvolume, type BlobPart } from "../disk/subvolume-stream.ts";
import type { SandboxSpec, SandboxStatus } from "../../contract/node-api.ts";
import type { SnapshotDescriptor } from "../../contract/snapshot-descriptor.ts";
import { captureReady, restoreCaptured, type CaptureDeps } from "./capture.ts";
import type { BootCaptures } from "./boot-capture.ts";
import { sha256 } from "../../contract/build-recipe.ts";

/** Metadata the cache adds to a template's TemplateInfo. */
export interface CachedTemplateInfo extends TemplateInfo {
  /** Known to the catalog (published here or pulled): its absence there later means deleted. */
  catalog?: boolean;
  digest?: string;
  /** The checkpoint taken after the start command was ready (capture.ts). */
  capture?: SnapshotDescriptor;
}

export interface TemplateStream extends BlobPart {
  /** Data key wrapped by the cluster key; absent = plaintext. */
  wrappedKey?: string;
}

export interface TemplateManifest {
  name: string;
  stream: TemplateStream;
  info: CachedTemplateInfo;
  publishedAt: string;
}

export interface AliasManifest {
  alias: string;
  /** Builds the alias pointed at, newest first (prefetch takes the first N). */
  builds: string[];
  updatedAt: string;
}

/** What startup recovery found for one entry and what it did. */
export interface RecoveryDecision {
  name: string;
  state: "work-leftover" | "partial-pull" | "no-metadata" | "no-subvolume" | "writable" | "complete";
  catalog: "present" | "deleted" | "never" | "differs" | "unknown";
  inUse: boolean;
  action: "keep" | "publish" | "repull" | "repoint" | "drop";
}

export interface TemplateCacheOptions {
  disks: Disks;
  blob?: BlobStore;
  clusterKey?: Buffer;
  /** The key before a rotation (SPACE_ENCRYPTION_KEY_PREVIOUS): unwraps what it wrapped, never wraps. */
  previousKey?: Buffer;
  /** Templates of the sandboxes on this node (never evicted nor dropped). */
  inUse: () => Set<string>;
  /** Cache size (MiB of template rootfs) above which the LRU evicts. */
  targetMib: number;
  gcIntervalMs: number;
  graceMs: number;
  /** Newest builds per template to keep pulled. */
  prefetch: number;
  /** Host scratch space for downloads. */
  scratchDir: string;
  /** Capture after ready (runc + CRIU nodes only). */
  capture?: CaptureDeps;
  /** Capture after boot: cold creates of templates without a capture of their own restore one (boot-capture.ts); absent = they boot. */
  bootCaptures?: BootCaptures;
  /** Templates the node makes itself on first use (e.g. `code-interpreter-v1` from its tarball); undefined = not one of them. */
  provide?: (name: string, signal: AbortSignal) => Promise<TemplateInfo | undefined>;
  logger: Logger;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const HISTORY = 20;
const T = 30 * 60_000;
const WORK = /^\.(pull|import|point|old)-/;

export class TemplateCache {
  private readonly o: TemplateCacheOptions;
  private readonly pulling = new Map<string, Promise<TemplateInfo>>();
  private readonly pins = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly stopping = new AbortController();

  constructor(o: TemplateCacheOptions) {
    this.o = o;
  }

  private get dir(): string {
    return this.o.disks.cache.templatesDir;
  }
  private meta(name: string): string {
    return join(this.dir, `${name}.json`);
  }

  // ------------------------------------------------------------------ use

  /**
   * The template, pulled from the catalog when this node lacks it; pinned (never evicted)
   * until `release` is called. Concurrent callers share one pull.
   */
  async acquire(name: string, signal: AbortSignal): Promise<{ info: TemplateInfo; release: () => void }> {
    this.pins.set(name, (this.pins.get(name) ?? 0) + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const n = (this.pins.get(name) ?? 1) - 1;
      if (n > 0) this.pins.set(name, n);
      else this.pins.delete(name);
    };
    try {
      return { info: await this.ensure(name, signal), release };
    } catch (e) {
      release();
      throw e;
    }
  }

  /** The template on this node (pulled when absent), marked as just used. */
  async ensure(name: string, signal: AbortSignal): Promise<TemplateInfo> {
    const have = await this.o.disks.templateInfo(name);
    if (have) {
      await this.touch(name);
      return have;
    }
    if (!NAME.test(name)) throw invalid(`template name ${JSON.stringify(name)} is not valid on a node`);
    const running = this.pulling.get(name);
    if (running) return running;
    const p = this.pullNamed(name, signal).finally(() => this.pulling.delete(name));
    this.pulling.set(name, p);
    return p;
  }

  private async pullNamed(name: string, signal: AbortSignal): Promise<TemplateInfo> {
    const provided = await this.o.provide?.(name, signal);
    if (provided) return provided;
    const blob = this.o.blob;
    const missing = () => new SpaceError("not_found", `template ${name} is not in this node's cache nor in the template catalog`);
    if (!blob) throw missing();
    const alias = await readJson<AliasManifest>(blob, aliasKey(name), signal);
    if (alias?.builds[0]) {
      await this.ensure(alias.builds[0], signal);
      return this.point(name, alias.builds[0], signal, { publish: false });
    }
    const manifest = await readJson<TemplateManifest>(blob, buildKey(name), signal);
    if (!manifest) throw missing();
    return this.pull(manifest, signal);
  }

  private async touch(name: string): Promise<void> {
    const now = new Date();
    await utimes(this.meta(name), now, now).catch(() => undefined);
  }

  // ------------------------------------------------------------------ capture after ready

  /** Checkpoints template `name` after its start command is ready and records it in its metadata. */
  async capture(name: string, signal: AbortSignal): Promise<SnapshotDescriptor> {
    if (!this.o.capture) throw new SpaceError("failed_precondition", "this node cannot capture templates (memory checkpoints need runc + CRIU)");
    const desc = await captureReady(this.o.capture, name, signal);
    const info = (await this.o.disks.templateInfo(name)) as CachedTemplateInfo;
    await this.writeInfo({ ...info, capture: desc } as CachedTemplateInfo);
    return desc;
  }

  /** A create restored from its template's capture, after ready or else after boot; undefined = boot cold. */
  async restoreCaptured(spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus | undefined> {
    if (!this.o.capture) return undefined;
    const info = (await this.o.disks.templateInfo(spec.template)) as CachedTemplateInfo | undefined;
    const boot = this.o.bootCaptures;
    if (!info || !(info.capture || boot?.eligible(spec))) return undefined;
    // A create, restored or booted, is admitted the same: a restore skips the manager's admission.
    await this.o.disks.admit(spec.template, spec.diskMib);
    if (info.capture) return restoreCaptured(this.o.capture, spec, info.capture, signal);
    return boot?.restore(spec, info, signal);
  }

  // ------------------------------------------------------------------ publish / pull

  /** Publishes a complete local template to the catalog (its stream once per digest). */
  async publish(name: string, signal: AbortSignal): Promise<TemplateManifest> {
    const blob = this.o.blob;
    if (!blob) throw new SpaceError("failed_precondition", "this node has no blob store to publish templates to");
    const info = (await this.o.disks.templateInfo(name)) as CachedTemplateInfo | undefined;
    if (!info) throw new SpaceError("not_found", `template ${name} is not in this node's cache`);
    const hex = (info.digest ?? `sha256:${sha256(`${name}\0${info.importedAt}\0${info.source}`)}`).replace(/^sha256:/, "");
    const ext = this.o.clusterKey ? ".btrfs.enc" : ".btrfs";
    const key = `templates/streams/${hex}${ext}`;
    const sideKey = `templates/streams/${hex}${ext}.json`;
    let stream = await readJson<TemplateStream>(blob, sideKey, signal);
    const head = stream ? await blob.head(key, signal) : null;
    if (!stream || !head || head.sha256 !== stream.sha256) {
      const dataKey = this.o.clusterKey ? newDataKey() : undefined;
      const put = await putSubvolume(blob, key, this.o.disks.templatePath(name), { dataKey }, signal);
      stream = { ...put, ...(dataKey ? { wrappedKey: wrapKey(this.o.clusterKey!, dataKey) } : {}) };
      await blob.put(sideKey, Buffer.from(JSON.stringify(stream)), signal);
    }
    const published: CachedTemplateInfo = { ...info, catalog: true };
    const manifest: TemplateManifest = { name, stream, info: published, publishedAt: new Date().toISOString() };
    await blob.put(buildKey(name), Buffer.from(JSON.stringify(manifest)), signal);
    await this.writeInfo(published);
    this.o.logger.info({ template: name, key, bytes: stream.sizeBytes }, "template published to the blob store");
    return manifest;
  }

  /** Receives a published build into the cache (checksum verified first, decrypted when needed). */
  private async pull(m: TemplateManifest, signal: AbortSignal): Promise<TemplateInfo> {
    const started = Date.now();
    const name = m.name;
    let dataKey: Buffer | undefined;
    if (m.stream.wrappedKey) {
      if (!this.o.clusterKey) throw new SpaceError("failed_precondition", `template ${name} is encrypted and this node has no SPACE_ENCRYPTION_KEY`);
      dataKey = unwrapKey(this.o.clusterKey, m.stream.wrappedKey, this.o.previousKey);
    }
    const work = join(this.dir, `.pull-${name}`);
    const file = join(this.o.scratchDir, `pull-${name}-${randomId(6)}`);
    await this.dropWork(work);
    await mkdir(work, { recursive: true });
    await mkdir(this.o.scratchDir, { recursive: true });
    try {
      await fetchSubvolume(this.o.blob!, m.stream, file, work, dataKey, signal, "template stream");
      const [received] = await readdir(work);
      if (!received) throw new SpaceError("internal", `btrfs receive of template ${name} produced no subvolume`);
      const dest = this.o.disks.templatePath(name);
      await btrfs.subvolumeDelete(dest, signal).catch(() => undefined);
      await btrfs.snapshotReadonly(join(work, received), dest, signal, T);
      const info: CachedTemplateInfo = { ...m.info, name, catalog: true, source: `pull:${m.stream.key}` };
      await this.writeInfo(info);
      this.o.logger.info({ template: name, bytes: m.stream.sizeBytes, ms: Date.now() - started }, "template pulled from the blob store");
      return info;
    } finally {
      await this.dropWork(work).catch(() => undefined);
      await rm(file, { force: true }).catch(() => undefined);
    }
  }

  /** Deletes a work dir and any subvolume a receive left in it. */
  private async dropWork(work: string): Promise<void> {
    for (const n of await readdir(work).catch(() => [] as string[])) await btrfs.subvolumeDelete(join(work, n)).catch(() => undefined);
    await btrfs.subvolumeDelete(work).catch(() => undefined);
    await rm(work, { recursive: true, force: true });
  }

  private async writeInfo(info: TemplateInfo): Promise<void> {
    const tmp = join(this.dir, `.meta-${info.name}-${randomId(6)}`);
    await writeFile(tmp, JSON.stringify(info, null, 2));
    await rename(tmp, this.meta(info.name));
    this.o.disks.forgetTemplate(info.name);
  }

  // ------------------------------------------------------------------ aliases / removal

  /**
   * Points the node template `alias` (a template id sandboxes are created from) at the built
   * template `name`: a snapshot swapped in place, so running sandboxes (their own snapshots)
   * are untouched and the next create boots the new build. Recorded in the catalog unless
   * the catalog is where the pointer came from.
   */
  async point(alias: string, name: string, signal: AbortSignal, o: { publish?: boolean } = {}): Promise<TemplateInfo> {
    if (alias === name) throw invalid("a template cannot point at itself");
    if (!NAME.test(alias)) throw invalid(`template name ${JSON.stringify(alias)} is not valid on a node`);
    const info = (await this.o.disks.templateInfo(name)) as CachedTemplateInfo | undefined;
    if (!info) throw new SpaceError("not_found", `template ${name} is not in this node's cache`);
    const tmp = join(this.dir, `.point-${alias}-${randomId(6)}`);
    await btrfs.snapshot(this.o.disks.templatePath(name), tmp, signal);
    await btrfs.setReadonly(tmp, signal);
    const dest = this.o.disks.templatePath(alias);
    const old = join(this.dir, `.old-${alias}-${randomId(6)}`);
    if (await lstat(dest).catch(() => undefined)) await rename(dest, old);
    await rename(tmp, dest);
    const publish = o.publish !== false && this.o.blob;
    const aliased: CachedTemplateInfo = { ...info, name: alias, source: `alias:${name}`, catalog: Boolean(this.o.blob) };
    await this.writeInfo(aliased);
    await this.o.bootCaptures?.drop(alias);
    await btrfs.subvolumeDelete(old, signal).catch(() => undefined);
    if (publish) {
      const blob = this.o.blob!;
      const prev = await readJson<AliasManifest>(blob, aliasKey(alias), signal);
      const builds = [name, ...(prev?.builds ?? []).filter((b) => b !== name)].slice(0, HISTORY);
      await blob.put(aliasKey(alias), Buffer.from(JSON.stringify({ alias, builds, updatedAt: new Date().toISOString() } satisfies AliasManifest)), signal);
    }
    return aliased;
  }

  /** Removes a template from this node; with `catalog`, from the blob store too. Absent = ok. */
  async remove(name: string, signal: AbortSignal, o: { catalog: boolean }): Promise<void> {
    if (name === "base") throw invalid("the base template cannot be deleted");
    if (!NAME.test(name)) throw invalid(`template name ${JSON.stringify(name)} is not valid on a node`);
    await rm(this.meta(name), { force: true });
    this.o.disks.forgetTemplate(name);
    await this.o.bootCaptures?.drop(name);
    await btrfs.subvolumeDelete(this.o.disks.templatePath(name), signal);
    if (!o.catalog || !this.o.blob) return;
    const blob = this.o.blob;
    const m = await readJson<TemplateManifest>(blob, buildKey(name), signal);
    await blob.delete(aliasKey(name), signal);
    await blob.delete(buildKey(name), signal);
    if (m && !(await this.streamReferenced(m.stream.key, signal))) {
      await blob.delete(m.stream.key, signal);
      await blob.delete(`${m.stream.key}.json`, signal);
    }
  }

  private async streamReferenced(key: string, signal: AbortSignal): Promise<boolean> {
    for (const k of await this.o.blob!.list("templates/builds/", signal)) {
      const m = await readJson<TemplateManifest>(this.o.blob!, k, signal);
      if (m?.stream.key === key) return true;
    }
    return false;
  }

  // ------------------------------------------------------------------ LRU, GC, prefetch

  /** The cache as eviction sees it: groups of a build and the aliases pointing at it. */
  async usage(): Promise<{ totalMib: number; groups: CacheGroup[] }> {
    const infos = (await this.o.disks.listTemplates()) as CachedTemplateInfo[];
    const inUse = this.o.inUse();
    const byName = new Map(infos.map((i) => [i.name, i]));
    const groups = new Map<string, CacheGroup>();
    for (const i of infos) {
      const target = i.source.startsWith("alias:") ? i.source.slice(6) : i.name;
      const head = byName.has(target) ? target : i.name;
      const g = groups.get(head) ?? { names: [], sizeMib: 0, lastUsedMs: 0, protected: false };
      g.names.push(i.name);
      if (i.name === head) g.sizeMib = i.rootfsSizeMib;
      else if (!g.sizeMib) g.sizeMib = i.rootfsSizeMib;
      g.lastUsedMs = Math.max(g.lastUsedMs, (await stat(this.meta(i.name)).catch(() => undefined))?.mtimeMs ?? 0);
      // Never evicted: base, a template a sandbox uses or a create holds, a pull in flight,
      // and anything the catalog does not have (its only copy is here).
      if (i.name === "base" || inUse.has(i.name) || this.pins.has(i.name) || this.pulling.has(i.name) || !i.catalog) g.protected = true;
      groups.set(head, g);
    }
    const list = [...groups.values()];
    return { totalMib: list.reduce((a, g) => a + g.sizeMib, 0), groups: list };
  }

  /** Evicts least-recently-used groups until the cache is within its target; returns the names. */
  async evict(signal: AbortSignal): Promise<string[]> {
    const { totalMib, groups } = await this.usage();
    let total = totalMib;
    const out: string[] = [];
    for (const g of groups.filter((g) => !g.protected).sort((a, b) => a.lastUsedMs - b.lastUsedMs)) {
      if (total <= this.o.targetMib) break;
      for (const n of g.names) await this.remove(n, signal, { catalog: false });
      total -= g.sizeMib;
      out.push(...g.names);
    }
    if (out.length) this.o.logger.info({ evicted: out, totalMib: total, targetMib: this.o.targetMib }, "template cache evicted least-recently-used templates");
    return out;
  }

  /**
   * One GC pass: templates the catalog deleted, unused for the grace period and not in use,
   * are dropped; then the LRU brings the cache within its target.
   */
  async gc(signal: AbortSignal): Promise<{ dropped: string[]; evicted: string[] }> {
    const catalog = await this.catalog(signal);
    const dropped: string[] = [];
    if (catalog) {
      const inUse = this.o.inUse();
      for (const i of (await this.o.disks.listTemplates()) as CachedTemplateInfo[]) {
        if (i.name === "base" || !i.catalog || inUse.has(i.name) || this.pins.has(i.name)) continue;
        if (catalog.builds.has(i.name) || catalog.aliases.has(i.name)) continue;
        const used = (await stat(this.meta(i.name)).catch(() => undefined))?.mtimeMs ?? 0;
        if (Date.now() - used < this.o.graceMs) continue;
        await this.remove(i.name, signal, { catalog: false });
        dropped.push(i.name);
      }
      if (dropped.length) this.o.logger.info({ dropped }, "template cache dropped templates deleted from the catalog");
    }
    return { dropped, evicted: await this.evict(signal) };
  }

  /** Pulls the newest `prefetch` builds of every template and points each alias at its newest. */
  async prefetch(signal: AbortSignal): Promise<string[]> {
    const catalog = await this.catalog(signal);
    if (!catalog) return [];
    const pulled: string[] = [];
    for (const a of catalog.aliases.values()) {
      for (const b of a.builds.slice(0, this.o.prefetch)) {
        if (await this.o.disks.templateInfo(b)) continue;
        if (!catalog.builds.has(b)) continue;
        try {
          await this.ensure(b, signal);
          pulled.push(b);
        } catch (e) {
          this.o.logger.warn({ template: b, err: e }, "template prefetch failed");
        }
      }
      const newest = a.builds[0];
      const cur = (await this.o.disks.templateInfo(a.alias))?.source;
      if (newest && cur !== `alias:${newest}` && (await this.o.disks.templateInfo(newest))) await this.point(a.alias, newest, signal, { publish: false });
    }
    return pulled;
  }

  /** The catalog's builds and aliases; undefined when it cannot be read (then nothing is dropped). */
  private async catalog(signal: AbortSignal): Promise<{ builds: Set<string>; aliases: Map<string, AliasManifest> } | undefined> {
    const blob = this.o.blob;
    if (!blob) return undefined;
    try {
      const builds = new Set((await blob.list("templates/builds/", signal)).map((k) => k.slice("templates/builds/".length, -".json".length)));
      const aliases = new Map<string, AliasManifest>();
      for (const k of await blob.list("templates/aliases/", signal)) {
        const a = await readJson<AliasManifest>(blob, k, signal);
        if (a) aliases.set(a.alias, a);
      }
      return { builds, aliases };
    } catch (e) {
      // A pass the node's stop aborted has nothing to report.
      if (!this.stopping.signal.aborted) this.o.logger.warn({ err: e }, "the template catalog cannot be read");
      return undefined;
    }
  }

  // ------------------------------------------------------------------ startup recovery

  /**
   * RECOVERY: on node start, every entry of the template cache is judged by what is on disk,
   * what the catalog says, and whether a sandbox uses it:
   *
   *   state                                  catalog            in use  action
   *   .pull-/.import-/.point-/.old- work dir any                any     drop
   *   subvolume without metadata             has it | not       -       repull | drop
   *   metadata without subvolume             has it | not       -       repull | drop
   *   writable subvolume (never frozen)      has it | not       -       repull | drop
   *   complete, `base`                       any                any     keep
   *   complete                               present            any     keep
   *   complete alias                         points elsewhere   no      repoint (pull newest, point)
   *   complete, once in the catalog          deleted            no      drop
   *   complete, once in the catalog          deleted            yes     keep
   *   complete, never published              never              any     publish (finish)
   *   complete                               unreadable         any     keep
   *
   * A pull that fails during recovery is logged; the next create or prefetch retries it.
   */
  async recover(signal: AbortSignal): Promise<RecoveryDecision[]> {
    const catalog = await this.catalog(signal);
    const inUse = this.o.inUse();
    const entries = await readdir(this.dir);
    const out: RecoveryDecision[] = [];
    const cat = (name: string): RecoveryDecision["catalog"] => (!catalog ? "unknown" : catalog.builds.has(name) || catalog.aliases.has(name) ? "present" : "never");
    for (const e of entries.filter((n) => WORK.test(n) || n.startsWith(".meta-"))) {
      out.push({ name: e, state: e.startsWith(".pull-") ? "partial-pull" : "work-leftover", catalog: "unknown", inUse: false, action: "drop" });
      await this.dropWork(join(this.dir, e)).catch(() => undefined);
    }
    const names = new Set(entries.filter((n) => !n.startsWith(".")).map((n) => n.replace(/\.json$/, "")));
    for (const name of [...names].sort()) {
      const [sub, metaRaw] = await Promise.all([lstat(this.o.disks.templatePath(name)).catch(() => undefined), readFile(this.meta(name), "utf8").catch(() => undefined)]);
      const info = metaRaw ? (safeJson(metaRaw) as CachedTemplateInfo | undefined) : undefined;
      const used = inUse.has(name);
      let state: RecoveryDecision["state"] = "complete";
      if (!sub?.isDirectory()) state = "no-subvolume";
      else if (!info) state = "no-metadata";
      else if (!(await btrfs.isReadonly(this.o.disks.templatePath(name)))) state = "writable";
      let c = cat(name);
      let action: RecoveryDecision["action"];
      if (state !== "complete") action = c === "present" ? "repull" : "drop";
      else if (name === "base") action = "keep";
      else if (c === "present") {
        const a = catalog!.aliases.get(name);
        if (a && info!.source.startsWith("alias:") && a.builds[0] && info!.source !== `alias:${a.builds[0]}` && !used) {
          c = "differs";
          action = "repoint";
        } else action = "keep";
      } else if (c === "unknown") action = "keep";
      else if (info!.catalog) {
        c = "deleted";
        action = used ? "keep" : "drop";
      } else action = "publish";
      out.push({ name, state, catalog: c, inUse: used, action });
      try {
        if (action === "drop" || action === "repull") {
          await rm(this.meta(name), { force: true });
          this.o.disks.forgetTemplate(name);
          if (sub) await btrfs.subvolumeDelete(this.o.disks.templatePath(name), signal);
        }
        if (action === "repull") await this.ensure(name, signal);
        if (action === "repoint") {
          const newest = catalog!.aliases.get(name)!.builds[0]!;
          await this.ensure(newest, signal);
          await this.point(name, newest, signal, { publish: false });
        }
        if (action === "publish") await this.publish(name, signal);
      } catch (err) {
        this.o.logger.warn({ template: name, action, err }, "template recovery step failed (retried on next use)");
      }
    }
    await this.o.bootCaptures?.prune(new Set((await this.o.disks.listTemplates()).map((i) => i.name)));
    this.o.logger.info({ decisions: out.filter((d) => d.action !== "keep").length, entries: out.length }, "template cache recovered");
    return out;
  }

  // ------------------------------------------------------------------ background loop

  /** Prefetch now, then GC + prefetch every interval. */
  start(): void {
    if (this.timer) return;
    const tick = () => {
      if (this.running) return;
      const signal = AbortSignal.any([this.stopping.signal, AbortSignal.timeout(T)]);
      this.running = (async () => {
        await this.prefetch(signal);
        await this.gc(signal);
      })()
        .catch((e: unknown) => this.o.logger.warn({ err: e }, "template cache GC pass failed"))
        .finally(() => {
          this.running = undefined;
        });
    };
    tick();
    this.timer = setInterval(tick, this.o.gcIntervalMs);
    this.timer.unref();
  }

  /** Stops the loop (a pass in progress is aborted); pulls for creates end with their requests. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.stopping.abort();
    await Promise.all([this.running, this.o.bootCaptures?.close()]);
  }
}

export interface CacheGroup {
  names: string[];
  sizeMib: number;
  lastUsedMs: number;
  protected: boolean;
}

const buildKey = (name: string) => `templates/builds/${name}.json`;
const aliasKey = (alias: string) => `templates/aliases/${alias}.json`;

async function readJson<T>(blob: BlobStore, key: string, signal: AbortSignal): Promise<T | undefined> {
  let body: Readable;
  try {
    body = await blob.get(key, signal);
  } catch (e) {
    if (SpaceError.from(e).code === "not_found") return undefined;
    throw e;
  }
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString("utf8")) as T;
}

function safeJson(t: string): unknown {
  try {
    return JSON.parse(t);
  } catch {
    return undefined;
  }
}

