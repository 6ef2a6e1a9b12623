/**
 * template-manager, build side: executes a BuildRecipe on this node. The source becomes
 * the first layer (an OCI image unpacked by umoci, a rootfs tarball, or a snapshot of a
 * cached template); every step then runs on a writable btrfs snapshot of its parent
 * layer — RUN in an isolated build container (the node runtime, its own network slot and
 * egress policy), COPY from the uploaded files, ENV/WORKDIR/USER as config — and the
 * result is frozen read-only as the layer named by the hash of its inputs, so an
 * unchanged prefix is never rebuilt. Finalize adds what SPACE needs (user `user`, envd
 * mount points), checks that envd's runtime can execute in the image, freezes the
 * read-only template subvolume with its metadata (size, digest, environment binding) and
 * publishes it to the blob store (template-cache.ts), where other nodes pull it.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { chmod, lstat, mkdir, open, readdir, readFile, rename, rm, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { exec } from "../../core/exec.ts";
import { invalid, SpaceError } from "../../core/errors.ts";
import { randomId } from "../../core/ids.ts";
import type { Logger } from "../../core/log.ts";
import type { BlobStore } from "../../blob/blob-store.ts";
import type { Runtime } from "../../runtime/runtime.ts";
import * as btrfs from "../disk/btrfs.ts";
import { treeSizeMib, type Disks, type TemplateInfo } from "../disk/disks.ts";
import type { NodeCache } from "../disk/node-cache.ts";
import type { NetworkSlots } from "../network/slots.ts";
import { normalizeImage, unpackImage } from "./oci-source.ts";
import type { RegistrySource } from "./registry-source.ts";
import type { RootfsTrust } from "./ca-trust.ts";
import {
  applyConfig,
  configFromImage,
  DEFAULT_PATH,
  describeStep,
  sha256,
  sourceKey,
  stepKey,
  type BuildRecipe,
  type BuildStep,
  type LayerConfig,
} from "../../contract/build-recipe.ts";
import type { BuildLogEntry } from "../../contract/node-builds.ts";
import { chmodFiles, chownAll, copyIntoRoot, ensureSandboxUser, lookupUser, resolveInRoot } from "./rootfs-fs.ts";

type LogLevel = BuildLogEntry["level"];

/** Template metadata the builder adds to the node cache's TemplateInfo. */
export interface BuiltTemplateInfo extends TemplateInfo {
  buildId: string;
  digest: string;
  environment: string;
  env: Record<string, string>;
  workdir: string;
  user: string;
  /**
   * The sandbox's default user: set only by a USER step of this recipe or of the template
   * it builds on (steps run as root by default; sandboxes keep `user` unless told).
   */
  defaultUser?: string;
  startCmd?: string;
  readyCmd?: string;
}

export interface BuildResult {
  name: string;
  rootfsSizeMib: number;
  digest: string;
  environment: string;
  cachedSteps: number;
  builtSteps: number;
  durationMs: number;
  config: LayerConfig;
  /** The registry manifest the build's image was pinned to. */
  imageDigest?: string;
  /** Bytes of image blobs a registry-image build fetched (0: every layer was on this node already). */
  pulledBytes?: number;
}

export type NodeBuildState = "building" | "ready" | "failed";

export interface NodeBuildStatus {
  buildId: string;
  name: string;
  status: NodeBuildState;
  logEntries: BuildLogEntry[];
  /** Total entries so far (the next offset once these are consumed). */
  logsTotal: number;
  result?: BuildResult;
  error?: { message: string; step?: string };
}

export interface TemplateBuilderOptions {
  cache: NodeCache;
  disks: Disks;
  runtime: Runtime;
  slots?: NetworkSlots;
  blobs: BlobStore;
  /** Host Node.js binary mounted at /opt/space/bin/node (envd's runtime): checked in finalize. */
  nodeBinary: string;
  /** Host scratch space (image layouts, COPY extraction, step logs). */
  scratchDir: string;
  /** The node's execution-environment digest (the build's binding). */
  environment: () => string;
  /** Checkpoints a finished template after its start command is ready (capture.ts); absent = never. */
  capture?: (name: string, signal: AbortSignal) => Promise<unknown>;
  /** The operator's CAs, appended to the trust store before each RUN step (ca-trust.ts); absent = none. */
  trust?: RootfsTrust;
  /** Pulls registry images (registry-source.ts); absent = registry sources are refused. */
  registry?: RegistrySource;
  /** Publishes a finished template to the blob store catalog (template-cache.ts); absent = kept local. */
  publish?: (name: string, signal: AbortSignal) => Promise<unknown>;
  logger: Logger;
}

interface Run {
  buildId: string;
  name: string;
  recipe: BuildRecipe;
  status: NodeBuildState;
  logs: BuildLogEntry[];
  result?: BuildResult;
  error?: { message: string; step?: string };
  abort: AbortController;
  containerId: string;
  netnsPath?: string;
  runs: number;
  done: Promise<void>;
}

const KEEP_FINISHED_MS = 30 * 60_000;

export class TemplateBuilder {
  private readonly o: TemplateBuilderOptions;
  private readonly builds = new Map<string, Run>();
  readonly layersDir: string;

  constructor(o: TemplateBuilderOptions) {
    this.o = o;
    this.layersDir = join(o.cache.mountPath, "layers");
  }

  /**
   * Pins a registry source to the digest its reference names now, before the build is
   * started: a refused, unknown or unreachable image fails the build request itself.
   */
  async pin(buildId: string, recipe: BuildRecipe, signal: AbortSignal): Promise<BuildRecipe> {
    const src = recipe.from;
    if (src.kind !== "registry" || src.digest || this.builds.has(buildId)) return recipe;
    const digest = await this.registry().resolve(src.image, src.auth, signal);
    return { ...recipe, from: { ...src, digest } };
  }

  private registry(): RegistrySource {
    if (!this.o.registry) throw new SpaceError("failed_precondition", "this node pulls no registry images (no registry configuration)");
    return this.o.registry;
  }

  /** Starts a build (idempotent by build id) and returns at once. */
  start(buildId: string, name: string, recipe: BuildRecipe): NodeBuildStatus {
    const have = this.builds.get(buildId);
    if (have) return this.status(buildId, 0);
    if (!/^[a-z0-9][a-z0-9._-]{0,62}$/.test(name)) throw invalid(`template name ${JSON.stringify(name)} is not valid on a node`);
    const run: Run = {
      buildId,
      name,
      recipe,
      status: "building",
      logs: [],
      abort: new AbortController(),
      containerId: randomId(20),
      runs: 0,
      done: Promise.resolve(),
    };
    this.builds.set(buildId, run);
    run.done = this.execute(run).finally(() => {
      const t = setTimeout(() => this.builds.delete(buildId), KEEP_FINISHED_MS);
      t.unref();
    });
    return this.status(buildId, 0);
  }

  status(buildId: string, logsOffset: number): NodeBuildStatus {
    const r = this.builds.get(buildId);
    if (!r) throw new SpaceError("not_found", `build ${buildId} is not known on this node`);
    return {
      buildId,
      name: r.name,
      status: r.status,
      logEntries: r.logs.slice(Math.max(0, logsOffset)),
      logsTotal: r.logs.length,
      ...(r.result ? { result: r.result } : {}),
      ...(r.error ? { error: r.error } : {}),
    };
  }

  /** Resolves when the build has finished (tests, CLI in-process). */
  async wait(buildId: string): Promise<NodeBuildStatus> {
    const r = this.builds.get(buildId);
    if (!r) throw new SpaceError("not_found", `build ${buildId} is not known on this node`);
    await r.done;
    return this.status(buildId, 0);
  }

  cancel(buildId: string): void {
    this.builds.get(buildId)?.abort.abort(new SpaceError("canceled", `build ${buildId} was cancelled`));
  }

  async close(): Promise<void> {
    for (const r of this.builds.values()) r.abort.abort(new SpaceError("unavailable", "node agent stopping"));
    await Promise.all([...this.builds.values()].map((r) => r.done.catch(() => undefined)));
  }

  private log(r: Run, level: LogLevel, message: string, step?: string): void {
    r.logs.push({ timestamp: new Date().toISOString(), level, message, ...(step !== undefined ? { step } : {}) });
  }

  // ------------------------------------------------------------------ the build

  private async execute(r: Run): Promise<void> {
    const started = Date.now();
    const signal = AbortSignal.any([r.abort.signal, AbortSignal.timeout(r.recipe.deadlineMs)]);
    const scratch = join(this.o.scratchDir, r.buildId);
    let step = "base";
    try {
      await mkdir(this.layersDir, { recursive: true });
      await mkdir(scratch, { recursive: true });
      if (this.o.slots) {
        const policy = { default: r.recipe.allowInternetAccess ? "allow" : "deny", rules: [] } as unknown as Parameters<NetworkSlots["claim"]>[1];
        const slot = await this.o.slots.claim(r.containerId, policy, signal);
        r.netnsPath = slot.netnsPath;
      }
      const src = r.recipe.from;
      this.log(r, "info", `FROM ${describeSource(src)}`, step);
      const source = await this.sourceLayer(r, scratch, signal);
      const cached = source.cached;
      let { key, config } = source;
      let rebuilt = !cached;
      let cachedSteps = cached ? 1 : 0;
      let builtSteps = cached ? 0 : 1;
      for (const [i, s] of r.recipe.steps.entries()) {
        step = String(i + 1);
        const k = stepKey(key, s);
        const desc = describeStep(s);
        if (!rebuilt && !r.recipe.force && !s.force && (await this.hasLayer(k))) {
          this.log(r, "info", `CACHED [${step}/${r.recipe.steps.length}] ${desc}`, step);
          cachedSteps++;
        } else {
          // After a rebuilt step every later one is rebuilt too: cache keys name inputs, and a
          // child of a rebuilt (possibly different) parent must not come from the old cache.
          rebuilt = true;
          this.log(r, "info", `[${step}/${r.recipe.steps.length}] ${desc}`, step);
          const t = Date.now();
          await this.buildLayer(key, k, { ...applyConfig(config, s) }, (work) => this.applyStep(r, s, config, work, scratch, step, signal), signal);
          this.log(r, "info", `step ${step} done in ${((Date.now() - t) / 1000).toFixed(1)} s`, step);
          builtSteps++;
        }
        config = applyConfig(config, s);
        key = k;
      }
      step = "finalize";
      this.log(r, "info", "finalizing the template (sandbox user, envd check, publish)", step);
      const info = await this.finalize(r, key, config, scratch, signal);
      r.result = {
        name: r.name,
        rootfsSizeMib: info.rootfsSizeMib,
        digest: info.digest,
        environment: info.environment,
        cachedSteps,
        builtSteps,
        durationMs: Date.now() - started,
        config,
        ...(src.kind === "registry" && src.digest ? { imageDigest: src.digest, pulledBytes: source.pulledBytes ?? 0 } : {}),
      };
      r.status = "ready";
      this.log(r, "info", `build ${r.buildId} ready: ${info.rootfsSizeMib} MiB, ${cachedSteps} cached / ${builtSteps} built layers, ${((Date.now() - started) / 1000).toFixed(1)} s`, step);
      this.o.logger.info({ buildId: r.buildId, template: r.name, ...r.result }, "template build ready");
    } catch (e: unknown) {
      const reason = signal.aborted && !(e instanceof SpaceError && e.code === "failed_precondition") ? signal.reason : e;
      const err = SpaceError.from(reason instanceof DOMException && reason.name === "TimeoutError" ? new SpaceError("deadline_exceeded", `build exceeded its deadline of ${Math.round(r.recipe.deadlineMs / 1000)} s`) : reason);
      r.error = { message: err.message, step };
      r.status = "failed";
      this.log(r, "error", err.message, step);
      this.o.logger.warn({ buildId: r.buildId, step, err: err.message }, "template build failed");
    } finally {
      await this.o.runtime.delete(r.containerId, AbortSignal.timeout(60_000)).catch(() => undefined);
      if (this.o.slots) await this.o.slots.release(r.containerId, AbortSignal.timeout(60_000)).catch(() => undefined);
      await rm(scratch, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  private layerPath(key: string): string {
    return join(this.layersDir, key);
  }

  private async hasLayer(key: string): Promise<boolean> {
    const [dir, meta] = await Promise.all([lstat(this.layerPath(key)).catch(() => undefined), lstat(`${this.layerPath(key)}.json`).catch(() => undefined)]);
    return Boolean(dir && meta);
  }

  private async layerConfig(key: string): Promise<LayerConfig> {
    const meta = JSON.parse(await readFile(`${this.layerPath(key)}.json`, "utf8")) as { config: LayerConfig };
    return meta.config;
  }

  /** Creates layer `key` from `parentKey` (or empty) by running `fill` on a writable copy. */
  private async buildLayer(parentKey: string | null, key: string, config: LayerConfig, fill: (work: string) => Promise<void>, signal: AbortSignal): Promise<void> {
    const work = join(this.layersDir, `.work-${key.slice(0, 16)}-${randomId(6)}`);
    if (parentKey) await btrfs.snapshot(this.layerPath(parentKey), work, signal);
    else await btrfs.subvolumeCreate(work, signal);
    try {
      await fill(work);
      await rmdir(join(work, ".space-build")).catch(() => undefined);
      await btrfs.setReadonly(work, signal);
      const final = this.layerPath(key);
      if (await lstat(final).catch(() => undefined)) await btrfs.subvolumeDelete(final, signal);
      await rename(work, final);
      await writeFile(`${final}.json`, JSON.stringify({ key, parent: parentKey, config, createdAt: new Date().toISOString() }));
    } catch (e) {
      await btrfs.subvolumeDelete(work).catch(() => undefined);
      throw e;
    }
  }

  private async sourceLayer(r: Run, scratch: string, signal: AbortSignal): Promise<{ key: string; config: LayerConfig; cached: boolean; pulledBytes?: number }> {
    const src = r.recipe.from;
    const force = r.recipe.force;
    switch (src.kind) {
      case "image": {
        const img = await normalizeImage(src.ref, join(scratch, "image"), signal);
        const key = sourceKey(`image:${img.manifestDigest}`);
        const config = configFromImage(img.config);
        if (!force && (await this.hasLayer(key))) {
          this.log(r, "info", `CACHED image ${img.manifestDigest}`, "base");
          return { key, config: await this.layerConfig(key), cached: true };
        }
        this.log(r, "info", `unpacking image ${img.manifestDigest} (umoci)`, "base");
        await this.buildLayer(null, key, config, (work) => unpackImage(img, work, signal), signal);
        return { key, config, cached: false };
      }
      case "registry": {
        if (!src.digest) throw new SpaceError("failed_precondition", `image ${src.image} was not pinned to a digest`);
        const digest = src.digest;
        const key = sourceKey(`registry:${digest}`);
        if (!force && (await this.hasLayer(key))) {
          this.log(r, "info", `CACHED image ${src.image}@${digest}: its layers are on this node (pulled 0 bytes)`, "base");
          return { key, config: await this.layerConfig(key), cached: true };
        }
        return this.registry().pull(src.image, digest, src.auth, signal, async (p) => {
          this.log(r, "info", `pulled ${src.image}@${digest}: ${p.fetchedBlobs} blobs fetched, ${p.reusedBlobs} already on this node (pulled ${p.pulledBytes} bytes)`, "base");
          const config = configFromImage(p.image.config);
          this.log(r, "info", `unpacking image ${p.image.manifestDigest} (umoci)`, "base");
          await this.buildLayer(null, key, config, (work) => unpackImage(p.image, work, signal), signal);
          return { key, config, cached: false, pulledBytes: p.pulledBytes };
        });
      }
      case "template": {
        const info = (await this.o.disks.templateInfo(src.name)) as BuiltTemplateInfo | undefined;
        if (!info) throw invalid(`template ${src.name} is not in this node's cache`);
        const key = sourceKey(`template:${src.name}:${info.digest ?? info.importedAt}`);
        const config: LayerConfig = { env: info.env ?? { PATH: DEFAULT_PATH }, workdir: info.workdir ?? "/", user: "root" };
        if (!force && (await this.hasLayer(key))) return { key, config: await this.layerConfig(key), cached: true };
        // A snapshot of the read-only template, frozen as the first layer.
        const work = join(this.layersDir, `.src-${randomId(8)}`);
        await btrfs.snapshot(this.o.disks.templatePath(src.name), work, signal);
        try {
          await btrfs.setReadonly(work, signal);
          const final = this.layerPath(key);
          if (await lstat(final).catch(() => undefined)) await btrfs.subvolumeDelete(final, signal);
          await rename(work, final);
          await writeFile(`${final}.json`, JSON.stringify({ key, parent: null, config, createdAt: new Date().toISOString() }));
        } catch (e) {
          await btrfs.subvolumeDelete(work).catch(() => undefined);
          throw e;
        }
        return { key, config, cached: false };
      }
      case "rootfs-tar": {
        const digest = await fileSha256(src.path);
        const key = sourceKey(`rootfs-tar:${digest}`);
        const config: LayerConfig = { env: { PATH: DEFAULT_PATH }, workdir: "/", user: "root" };
        if (!force && (await this.hasLayer(key))) return { key, config: await this.layerConfig(key), cached: true };
        await this.buildLayer(null, key, config, async (work) => {
          await exec("tar", ["--numeric-owner", "--xattrs", "--acls", "-xpf", src.path, "-C", work], { timeoutMs: 30 * 60_000, signal });
        }, signal);
        return { key, config, cached: false };
      }
    }
  }

  private async applyStep(r: Run, s: BuildStep, config: LayerConfig, work: string, scratch: string, step: string, signal: AbortSignal): Promise<void> {
    switch (s.type) {
      case "RUN": {
        const user = s.user || config.user;
        const res = await this.runInContainer(r, work, ["/bin/sh", "-c", s.cmd], { config, user, step, signal, needShell: true });
        if (res.exitCode !== 0) {
          const tail = res.tail.length ? `\n${res.tail.join("\n")}` : "";
          throw new SpaceError("failed_precondition", `step ${step} (RUN ${s.cmd}) failed with exit code ${res.exitCode ?? "none"}${tail}`);
        }
        return;
      }
      case "COPY": {
        const dir = join(scratch, `copy-${step}`);
        await mkdir(dir, { recursive: true });
        const archive = join(scratch, `copy-${step}.tar`);
        const body = await this.o.blobs.get(s.blobKey, signal).catch((e: unknown) => {
          throw SpaceError.from(e).code === "not_found" ? invalid(`COPY ${s.src}: files ${s.filesHash} were never uploaded`) : e;
        });
        const fh = await open(archive, "w");
        await pipeline(body, fh.createWriteStream(), { signal });
        // GNU tar strips leading "/" and refuses ".." members; it extracts into a private
        // scratch dir; the copy into the image resolves paths inside the rootfs.
        await exec("tar", ["--no-same-owner", "-xf", archive, "-C", dir], { timeoutMs: 10 * 60_000, signal });
        const rel = copySourceRoot(s.src);
        const from = rel ? join(dir, rel) : dir;
        const st = await lstat(from).catch(() => undefined);
        if (!st) throw invalid(`COPY: ${s.src} is not in the uploaded files`);
        const destAbs = resolveDest(config.workdir, s.dest);
        const srcIsDir = st.isDirectory();
        const target = !srcIsDir && s.dest.endsWith("/") ? `${destAbs}/${rel.split("/").pop()}` : destAbs;
        const written = await copyIntoRoot(work, from, target, srcIsDir);
        const owner = s.user || config.user;
        if (owner && owner !== "root") {
          const pw = await lookupUser(work, owner);
          await chownAll(written, pw.uid, pw.gid);
        }
        if (s.mode) await chmodFiles(written, parseInt(s.mode, 8));
        this.log(r, "info", `copied ${written.length} entries to ${target}`, step);
        return;
      }
      case "WORKDIR": {
        const p = await resolveInRoot(work, applyConfig(config, s).workdir);
        await mkdir(p, { recursive: true });
        return;
      }
      case "ENV":
      case "USER":
        if (s.type === "USER") await lookupUser(work, s.user); // refuse an unknown user now, not at boot
        return;
    }
  }

  /**
   * Runs argv as the init of a build container on `rootfs` and waits for it to exit,
   * streaming its output into the build log. A no-output watchdog and the build deadline
   * bound it. The exit status travels through a bind-mounted scratch dir.
   */
  private async runInContainer(
    r: Run,
    rootfs: string,
    argv: string[],
    o: { config: LayerConfig; user: string; step: string; signal: AbortSignal; needShell?: boolean; mounts?: { source: string; destination: string; readonly: boolean }[] },
  ): Promise<{ exitCode: number | null; tail: string[] }> {
    const n = ++r.runs;
    const id = r.containerId;
    const status = join(this.o.scratchDir, r.buildId, `run-${n}`);
    await mkdir(status, { recursive: true });
    await chmod(status, 0o777);
    const logPath = join(this.o.scratchDir, r.buildId, `run-${n}.log`);
    await writeFile(logPath, "");
    if (o.needShell && !(await lstat(await resolveInRoot(rootfs, "/bin/sh")).catch(() => undefined))) {
      throw invalid(`step ${o.step}: RUN needs /bin/sh in the image, and it has none`);
    }
    const pw = await lookupUser(rootfs, o.user);
    const cwd = o.config.workdir || "/";
    await mkdir(await resolveInRoot(rootfs, cwd), { recursive: true }).catch(() => undefined);
    if (r.recipe.allowInternetAccess) await this.writeResolvConf(rootfs);
    await this.o.trust?.apply(rootfs);
    // The exit status: the init is a tiny shell wrapper when the image has a shell.
    const hasShell = Boolean(await lstat(await resolveInRoot(rootfs, "/bin/sh")).catch(() => undefined));
    const args = hasShell ? ["/bin/sh", "-c", '"$@"; echo $? > /.space-build/exit', "space-build", ...argv] : argv;
    await this.o.runtime.delete(id, o.signal).catch(() => undefined);
    const bundle = await this.o.runtime.prepare(
      {
        id,
        rootfs,
        hostname: "build",
        args,
        env: { PATH: DEFAULT_PATH, ...this.o.trust?.env, ...o.config.env, HOME: pw.home, SPACE_BUILD: "1" },
        cwd,
        mounts: [{ source: status, destination: "/.space-build", readonly: false }, ...(o.mounts ?? [])],
        ...(r.netnsPath ? { netnsPath: r.netnsPath } : {}),
        resources: { vcpu: r.recipe.vcpu, memoryMib: r.recipe.memoryMib, pidsLimit: 4096 },
        logPath,
      },
      o.signal,
    );
    if (pw.uid !== 0) {
      // The OCI process runs as the step's user (the runtime's RunSpec has no user field).
      const cfgPath = join(bundle, "config.json");
      const cfg = JSON.parse(await readFile(cfgPath, "utf8")) as { process: { user: unknown; capabilities?: Record<string, string[]> } };
      cfg.process.user = { uid: pw.uid, gid: pw.gid };
      if (cfg.process.capabilities) cfg.process.capabilities = { bounding: cfg.process.capabilities.bounding ?? [], effective: [], permitted: [], inheritable: [], ambient: [] };
      await writeFile(cfgPath, JSON.stringify(cfg));
    }
    let offset = 0;
    let partial = "";
    const tail: string[] = [];
    const drain = async () => {
      const fh = await open(logPath, "r");
      try {
        const { size } = await fh.stat();
        if (size <= offset) return false;
        const buf = Buffer.alloc(Math.min(size - offset, 4 * 1024 * 1024));
        const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
        offset += bytesRead;
        const text = partial + buf.subarray(0, bytesRead).toString("utf8");
        const lines = text.split("\n");
        partial = lines.pop() ?? "";
        for (const l of lines) {
          this.log(r, "info", l, o.step);
          tail.push(l);
          if (tail.length > 20) tail.shift();
        }
        return bytesRead > 0;
      } finally {
        await fh.close();
      }
    };
    await this.o.runtime.start(id, o.signal);
    let lastOutput = Date.now();
    try {
      for (;;) {
        if (await drain()) lastOutput = Date.now();
        const st = await this.o.runtime.state(id, o.signal);
        if (!st || st.status === "stopped") break;
        if (Date.now() - lastOutput > r.recipe.noOutputTimeoutMs) {
          throw new SpaceError("deadline_exceeded", `step ${o.step} produced no output for ${Math.round(r.recipe.noOutputTimeoutMs / 1000)} s; stopped (no-output watchdog)`);
        }
        o.signal.throwIfAborted();
        await new Promise((res) => setTimeout(res, 100));
      }
      await drain();
      if (partial) {
        this.log(r, "info", partial, o.step);
        tail.push(partial);
      }
    } finally {
      await this.o.runtime.delete(id, AbortSignal.timeout(60_000)).catch(() => undefined);
    }
    const code = hasShell ? await readFile(join(status, "exit"), "utf8").then((t) => Number(t.trim()), () => null) : 0;
    return { exitCode: code, tail };
  }

  private async writeResolvConf(rootfs: string): Promise<void> {
    const resolv = await readFile("/etc/resolv.conf", "utf8").catch(() => "");
    const usable = resolv.split("\n").filter((l) => !/^nameserver\s+(127\.|::1)/.test(l)).join("\n");
    const etc = await resolveInRoot(rootfs, "/etc");
    if (!(await lstat(etc).catch(() => undefined))) return;
    const p = join(etc, "resolv.conf");
    await rm(p, { force: true });
    await writeFile(p, usable);
  }

  /** Sandbox user and mount points, the envd check, then the read-only template subvolume. */
  private async finalize(r: Run, key: string, config: LayerConfig, scratch: string, signal: AbortSignal): Promise<BuiltTemplateInfo> {
    const dest = this.o.disks.templatePath(r.name);
    if (await lstat(dest).catch(() => undefined)) throw new SpaceError("already_exists", `template ${r.name} already exists on this node`);
    const work = join(this.layersDir, `.final-${r.name}-${randomId(6)}`);
    await btrfs.snapshot(this.layerPath(key), work, signal);
    try {
      await ensureSandboxUser(work);
      // envd runs on the node's Node.js runtime mounted into the sandbox: it needs a glibc
      // userland of the node's architecture. Run it once here rather than fail every create.
      const check = await this.runInContainer(r, work, ["/opt/space/bin/node", "-e", "process.exit(0)"], {
        config: { env: { PATH: DEFAULT_PATH }, workdir: "/", user: "root" },
        user: "root",
        step: "finalize",
        signal,
        mounts: [{ source: this.o.nodeBinary, destination: "/opt/space/bin/node", readonly: true }],
      });
      if (check.exitCode !== 0) {
        throw new SpaceError(
          "failed_precondition",
          `SPACE's envd cannot run in this image: its Node.js runtime (mounted from the node) exited ${check.exitCode ?? "abnormally"}${check.tail.length ? `: ${check.tail.join(" ").slice(-300)}` : ""}. ` +
            "Templates need a glibc-based x86-64 userland (Debian, Ubuntu, Fedora...); musl (Alpine) and static/distroless images are not supported.",
        );
      }
      await rmdir(join(work, ".space-build")).catch(() => undefined);
      await rm(join(work, "etc/resolv.conf"), { force: true }).catch(() => undefined);
      await writeFile(join(work, "etc/resolv.conf"), "").catch(() => undefined);
      // Moving a read-only subvolume to another directory fails (EROFS: its ".." changes):
      // move first, then freeze.
      await rename(work, dest);
      await btrfs.setReadonly(dest, signal).catch(async (e: unknown) => {
        await btrfs.subvolumeDelete(dest).catch(() => undefined);
        throw e;
      });
    } catch (e) {
      await btrfs.subvolumeDelete(work).catch(() => undefined);
      throw e;
    }
    await btrfs.sync(this.o.cache.mountPath, signal).catch(() => undefined);
    // A template is a snapshot of its layers: simple quotas charge it only its own writes.
    const usage = this.o.disks.cache.quotaMode === "classic" ? await btrfs.qgroupUsage(dest, signal).catch(() => undefined) : undefined;
    const rootfsSizeMib = Math.ceil((usage?.referencedBytes ?? 0) / 1048576) || (await treeSizeMib(dest, signal));
    const digest = `sha256:${sha256(`${key}\0finalize\0${r.recipe.startCmd ?? ""}\0${r.recipe.readyCmd ?? ""}`)}`;
    let defaultUser = r.recipe.steps.flatMap((s) => (s.type === "USER" ? [s.user] : [])).at(-1);
    if (!defaultUser && r.recipe.from.kind === "template") {
      defaultUser = ((await this.o.disks.templateInfo(r.recipe.from.name)) as BuiltTemplateInfo | undefined)?.defaultUser;
    }
    const info: BuiltTemplateInfo = {
      name: r.name,
      rootfsSizeMib,
      importedAt: new Date().toISOString(),
      source: `build:${r.buildId}`,
      buildId: r.buildId,
      digest,
      environment: this.o.environment(),
      env: config.env,
      workdir: config.workdir,
      user: config.user,
      ...(defaultUser ? { defaultUser } : {}),
      ...(r.recipe.startCmd ? { startCmd: r.recipe.startCmd } : {}),
      ...(r.recipe.readyCmd ? { readyCmd: r.recipe.readyCmd } : {}),
    };
    await writeFile(join(this.o.cache.templatesDir, `${r.name}.json`), JSON.stringify(info, null, 2));
    void scratch;
    const dropTemplate = async () => {
      await rm(join(this.o.cache.templatesDir, `${r.name}.json`), { force: true });
      this.o.disks.forgetTemplate(r.name);
      await btrfs.subvolumeDelete(dest).catch(() => undefined);
    };
    if (r.recipe.capture && r.recipe.startCmd) {
      if (!this.o.capture) throw new SpaceError("failed_precondition", "this node cannot capture templates after ready (memory checkpoints need runc + CRIU)");
      const t = Date.now();
      this.log(r, "info", "capturing the template after its start command is ready", "finalize");
      await this.o.capture(r.name, signal).catch(async (e: unknown) => {
        await dropTemplate();
        throw new SpaceError("failed_precondition", `capturing template ${r.name} after ready failed: ${SpaceError.from(e).message}`);
      });
      this.log(r, "info", `captured in ${((Date.now() - t) / 1000).toFixed(1)} s`, "finalize");
    }
    if (this.o.publish) {
      const t = Date.now();
      await this.o.publish(r.name, signal).catch(async (e: unknown) => {
        // Never half-created: a build that could not be published leaves no template behind.
        await dropTemplate();
        throw new SpaceError("unavailable", `publishing template ${r.name} to the blob store failed: ${SpaceError.from(e).message}`);
      });
      this.log(r, "info", `published to the blob store in ${((Date.now() - t) / 1000).toFixed(1)} s`, "finalize");
    }
    return info;
  }

  /** Cached layers (key, size unknown without qgroup walk): for GC and tests. */
  async listLayers(): Promise<string[]> {
    return (await readdir(this.layersDir).catch(() => [] as string[])).filter((n) => /^[a-f0-9]{64}$/.test(n));
  }

  /** Drops every cached layer (cold-build benchmarks). */
  async pruneLayers(signal: AbortSignal): Promise<number> {
    const layers = await this.listLayers();
    for (const k of layers) {
      await btrfs.subvolumeDelete(this.layerPath(k), signal);
      await rm(`${this.layerPath(k)}.json`, { force: true });
    }
    return layers.length;
  }
}

/**
 * What a COPY source names inside its upload, as E2B's builder takes it: the path before
 * the first segment with a glob character (`*?[{`). The SDK uploads only the matches, so
 * `folder/*` copies folder's uploaded entries into the destination (`folder/a` → `dest/a`,
 * `folder/sub/x` → `dest/sub/x`), `*.txt` the matching files; without a glob a directory's
 * contents go into the destination and a file becomes it. "" = the upload root.
 */
export function copySourceRoot(src: string): string {
  let meta = -1;
  for (let i = 0; i < src.length && meta < 0; i++) {
    if (src[i] === "\\") i++;
    else if ("*?[{".includes(src[i]!)) meta = i;
  }
  const stat = meta < 0 ? src : src.slice(0, Math.max(0, src.lastIndexOf("/", meta)));
  const parts = stat.replace(/\\(.)/g, "$1").split("/").filter((p) => p && p !== ".");
  if (parts.includes("..")) throw invalid(`COPY ${JSON.stringify(src)}: the source must stay inside the build context`);
  return parts.join("/");
}

function resolveDest(workdir: string, dest: string): string {
  const abs = dest.startsWith("/") ? dest : `${workdir.replace(/\/+$/, "")}/${dest}`;
  return abs.replace(/\/+$/, "") || "/";
}

async function fileSha256(path: string): Promise<string> {
  const h = createHash("sha256");
  await pipeline(createReadStream(path), h);
  return h.digest("hex");
}

function describeSource(src: BuildRecipe["from"]): string {
  switch (src.kind) {
    case "image":
      return src.ref;
    case "registry":
      return src.digest ? `${src.image} (pinned to ${src.digest})` : src.image;
    case "template":
      return src.name;
    case "rootfs-tar":
      return src.path;
  }
}
