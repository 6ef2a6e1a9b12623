/**
 * Template builds on the control plane: turns a client's build request (E2B's
 * TemplateBuildStartV2, which `space template build` also sends) into a node BuildRecipe,
 * places it (src/substrate/placement.ts over the substrate's node directory: a ready node
 * of any group, ranked by free capacity and by having the template it starts from),
 * starts it there through the Substrate (node-api on Direct and on Kubernetes alike),
 * follows it (logs into the store, status, result), and on success releases it (alias
 * tags → build) and points the node's template-id subvolume at it so
 * `Sandbox.create('<alias>')` boots it. A build is immutable once ready; its row records
 * rootfs size, environment binding, digest and logs.
 *
 * Logs are stored as JSON lines in `builds.logs` (one BuildLogEntry per line); E2B's
 * `logsOffset` is an index into them.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { z } from "zod";
import type { Db, Queryable } from "../store/db.ts";
import type { Logger } from "../core/log.ts";
import { spaceMetrics, type BuildMetrics } from "../core/metrics.ts";
import { invalid, notFound, SpaceError } from "../core/errors.ts";
import type { TenantId } from "../core/ids.ts";
import { buildingBuildIds, ownTemplateByName } from "../store/builds.ts";
import {
  appendBuildLogs,
  createBuild,
  createTemplate,
  getBuild,
  newBuildId,
  resolveTemplate,
  setRelease,
  updateBuild,
  type Build,
  type Template,
} from "../store/templates.ts";
import { ecrRegistryAuth } from "./ecr-auth.ts";
import { formatRegistryRef, IMAGE_TRANSPORTS, nodeTemplateName, parseOciRef, parseRegistryRef, type BuildRecipeInput, type BuildStep, type RegistryAuth } from "../contract/build-recipe.ts";
import type { BuildLogEntry } from "../contract/node-builds.ts";
import type { NodeBuildStatusWire, Substrate } from "../substrate/substrate.ts";
import type { NodeDirectory } from "../substrate/node-directory.ts";
import { decidePlacement, type PlacementWork } from "../substrate/placement.ts";

/** The E2B build body (TemplateBuildStartV2). */
export const TemplateBuildStart = z.object({
  fromImage: z.string().optional(),
  fromTemplate: z.string().optional(),
  fromImageRegistry: z.unknown().optional(),
  startCmd: z.string().optional(),
  readyCmd: z.string().optional(),
  /** SPACE extension: checkpoint the template once its start command is ready; sandboxes restore from it. */
  captureAfterReady: z.boolean().optional(),
  force: z.boolean().optional(),
  steps: z
    .array(z.object({ type: z.string(), args: z.array(z.string()).default([]), filesHash: z.string().optional(), force: z.boolean().optional() }).passthrough())
    .default([]),
});
export type TemplateBuildStart = z.infer<typeof TemplateBuildStart>;

/** Templates every node provides itself (node/templates/base-template.ts), with no store row: public to every team, as E2B's own. */
export const BUILT_IN_TEMPLATES: ReadonlySet<string> = new Set(["base"]);

/** The SDK's default image (`fromBaseImage()`, or no `from*` at all): SPACE's `base` template. */
export const E2B_BASE_IMAGES = new Set(["e2bdev/base", "e2bdev/base:latest"]);

export const filesBlobKey = (templateId: string, hash: string) => `template-files/${templateId}/${hash.replace(/[^A-Za-z0-9_=+@,:.-]/g, "_")}`;

export interface BuildSpecRecord {
  alias: string;
  tags: string[];
  tenantId: string;
  nodeId?: string;
  /** Older rows: the node's address when the build started (its id is what is followed). */
  nodeUrl?: string;
  request?: TemplateBuildStart;
  logsTotal?: number;
  [k: string]: unknown;
}

export interface BuildCoordinatorDeps {
  db: Db;
  /** How builds reach their node (the sandbox layer's). */
  substrate: Substrate;
  /** The substrate's nodes, placement's input (the sandbox layer's). */
  nodes: NodeDirectory;
  /** Signs COPY upload URLs. */
  internalToken: string;
  log: Logger;
  pollMs?: number;
  /** Build durations and layer cache results (core/metrics.ts); absent = unregistered. */
  metrics?: BuildMetrics;
  /** Where `fromAWSRegistry` keys are exchanged for an ECR token (SPACE_REGISTRY_ECR_ENDPOINT); absent = the region's endpoint. */
  ecrEndpoint?: string;
}

export interface BuildRequestInput {
  name: string;
  tags?: string[];
  cpuCount?: number;
  memoryMB?: number;
}

/** The target of a Native `template.build` operation: the build it waits for. */
export const buildTarget = (buildId: string) => `builds/${buildId}`;

const ALIAS = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Splits `name[:tag]` at the first ':' (as E2B does) and validates both parts: an empty
 * name (`":x"`) or tag (`"name:"`) is refused, naming `field` and the value.
 */
export function parseNameTag(ref: string, field = "name"): { alias: string; tag: string | undefined } {
  const i = ref.indexOf(":");
  const alias = i < 0 ? ref : ref.slice(0, i);
  const tag = i < 0 ? undefined : ref.slice(i + 1);
  if (!ALIAS.test(alias)) {
    throw invalid(`${field} ${JSON.stringify(ref)}: template name ${JSON.stringify(alias)} is not valid: lower-case letters, digits, '.', '_' and '-' (at most 63)`);
  }
  if (tag !== undefined) validateTag(tag, `${field} ${JSON.stringify(ref)}: tag`);
  return { alias, tag };
}

/** A tag as E2B allows it (and not a UUID: those are build ids). */
export function validateTag(tag: string, what = "tag"): string {
  if (!ALIAS.test(tag)) throw invalid(`${what} ${JSON.stringify(tag)} is not valid: lower-case letters, digits, '.', '_' and '-' (at most 63)`);
  if (UUID.test(tag)) throw invalid(`${what} ${JSON.stringify(tag)} is not valid: a tag cannot be a UUID`);
  return tag;
}

export class BuildCoordinator {
  private readonly d: BuildCoordinatorDeps;
  private readonly following = new Map<string, Promise<void>>();
  private closed = false;

  constructor(d: BuildCoordinatorDeps) {
    this.d = d;
  }

  /** Follows builds a previous process left running (their node may still have them). */
  async resume(): Promise<void> {
    for (const id of await buildingBuildIds(this.d.db)) this.follow(id);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.following.values()].map((p) => p.catch(() => undefined)));
  }

  /** POST /v3/templates: the template (created on first use) and a new waiting build. */
  async request(tenantId: TenantId, input: BuildRequestInput): Promise<{ template: Template; build: Build; tags: string[] }> {
    return this.d.db.transaction((tx) => this.requestIn(tx, tenantId, input));
  }

  /** `request` inside the caller's transaction (Native: with its operation), optionally with a chosen build id. */
  async requestIn(tx: Queryable, tenantId: TenantId, input: BuildRequestInput, buildId?: string): Promise<{ template: Template; build: Build; tags: string[] }> {
    const { alias, tag } = parseNameTag(input.name);
    const tags = [...new Set([...(tag ? [tag] : []), ...(input.tags ?? []).map((t) => validateTag(t, "tags:"))])];
    // Names are per team (as E2B's): another team's `oci-tpl` is a different template.
    const template = (await ownTemplateByName(tx, tenantId, alias)) ?? (await createTemplate(tx, { tenantId, name: alias }));
    const spec: BuildSpecRecord = { alias, tags, tenantId };
    const build = await createBuild(tx, {
      id: buildId ?? newBuildId(),
      templateId: template.id,
      spec,
      ...(input.cpuCount ? { vcpu: input.cpuCount } : {}),
      ...(input.memoryMB ? { memoryMib: input.memoryMB } : {}),
    });
    return { template, build, tags };
  }

  /** The build of `templateId` owned by `tenantId`, or not_found. */
  async ownBuild(tenantId: TenantId, templateId: string, buildId: string): Promise<Build> {
    const b = await getBuild(this.d.db, buildId).catch(() => undefined);
    const spec = b?.spec as BuildSpecRecord | undefined;
    if (!b || b.templateId !== templateId || spec?.tenantId !== tenantId) throw notFound(`build ${buildId} of template ${templateId} not found`);
    return b;
  }

  /** POST /v2/templates/{id}/builds/{buildID}: validates, converts and starts the build on a node. */
  async start(tenantId: TenantId, templateId: string, buildId: string, body: TemplateBuildStart): Promise<void> {
    const build = await this.ownBuild(tenantId, templateId, buildId);
    if (build.status !== "waiting") throw new SpaceError("failed_precondition", `build ${buildId} was already started (${build.status})`);
    const recipe = await this.toRecipe(tenantId, templateId, body, build);
    const nodeId = await this.place(recipe);
    await updateBuild(this.d.db, buildId, {
      status: "building",
      spec: { ...(build.spec as BuildSpecRecord), request: redactRequest(body), nodeId, logsTotal: 0 },
    });
    try {
      await this.d.substrate.startBuild(nodeId, { buildId, name: nodeTemplateName(buildId), recipe }, nodeCall());
    } catch (e) {
      await this.fail(buildId, SpaceError.from(e).message, "base");
      throw e;
    }
    this.follow(buildId);
  }

  /** Converts an E2B build body to a node recipe (the `from` resolved for the tenant). */
  async toRecipe(tenantId: TenantId, templateId: string, body: TemplateBuildStart, build: Pick<Build, "vcpu" | "memoryMib">): Promise<BuildRecipeInput> {
    let from: BuildRecipeInput["from"];
    if (body.fromTemplate) {
      const ref = body.fromTemplate;
      const resolved = await resolveTemplate(this.d.db, tenantId, ref).catch((e: unknown) => {
        if (e instanceof SpaceError && e.code === "not_found" && ref === "base") return undefined;
        throw e;
      });
      from = { kind: "template", name: resolved ? nodeTemplateName(resolved.build.id) : "base" };
    } else if (!body.fromImage || E2B_BASE_IMAGES.has(body.fromImage)) {
      from = { kind: "template", name: "base" };
    } else if (body.fromImage.startsWith("oci://")) {
      if (!parseOciRef(body.fromImage)) {
        throw invalid(`fromImage ${JSON.stringify(body.fromImage)} is not an oci:// reference: use oci://<absolute path of an OCI layout or archive on the node>[:tag][@sha256:digest]`, { field: "fromImage" });
      }
      from = { kind: "image", ref: body.fromImage };
    } else if (IMAGE_TRANSPORTS.some((t) => body.fromImage!.startsWith(t))) {
      from = { kind: "image", ref: body.fromImage };
    } else if (body.fromImage.startsWith("rootfs-tar:")) {
      from = { kind: "rootfs-tar", path: body.fromImage.slice("rootfs-tar:".length) };
    } else {
      const ref = parseRegistryRef(body.fromImage);
      if (!ref) {
        throw invalid(
          `fromImage ${JSON.stringify(body.fromImage)} is not an image reference: use [registry/]repository[:tag][@sha256:digest] (e.g. python:3.12, 127.0.0.1:5000/team/app:v1), or a local image: oci-archive:<path>, oci:<dir>[:tag], docker-archive:<path>`,
          { field: "fromImage" },
        );
      }
      const auth = await registryAuth(body.fromImageRegistry, body.fromImage, this.d.ecrEndpoint ?? "");
      from = { kind: "registry", image: formatRegistryRef(ref), ...(auth ? { auth } : {}) };
    }
    const steps: BuildStep[] = body.steps.map((s, i): BuildStep => {
      const a = s.args;
      const force = s.force || undefined;
      switch (s.type.toUpperCase()) {
        case "RUN":
          if (!a[0]) throw invalid(`step ${i + 1}: RUN needs a command`);
          return { type: "RUN", cmd: a[0], ...(a[1] ? { user: a[1] } : {}), ...(force ? { force } : {}) };
        case "COPY":
          if (!a[0] || !a[1] || !s.filesHash) throw invalid(`step ${i + 1}: COPY needs src, dest and filesHash`);
          return {
            type: "COPY",
            src: a[0],
            dest: a[1],
            filesHash: s.filesHash,
            blobKey: filesBlobKey(templateId, s.filesHash),
            ...(a[2] ? { user: a[2] } : {}),
            ...(a[3] ? { mode: a[3] } : {}),
            ...(force ? { force } : {}),
          };
        case "ENV": {
          const env: Record<string, string> = {};
          for (let k = 0; k + 1 < a.length; k += 2) env[a[k]!] = a[k + 1]!;
          return { type: "ENV", env, ...(force ? { force } : {}) };
        }
        case "WORKDIR":
          if (!a[0]) throw invalid(`step ${i + 1}: WORKDIR needs a path`);
          return { type: "WORKDIR", path: a[0], ...(force ? { force } : {}) };
        case "USER":
          if (!a[0]) throw invalid(`step ${i + 1}: USER needs a user`);
          return { type: "USER", user: a[0], ...(force ? { force } : {}) };
        default:
          throw invalid(`step ${i + 1}: unsupported step type ${JSON.stringify(s.type)} (RUN, COPY, ENV, WORKDIR, USER)`);
      }
    });
    return {
      from,
      steps,
      ...(body.startCmd ? { startCmd: body.startCmd } : {}),
      ...(body.readyCmd ? { readyCmd: body.readyCmd } : {}),
      ...(body.captureAfterReady ? { capture: true } : {}),
      force: body.force ?? false,
      ...(build.vcpu ? { vcpu: build.vcpu } : {}),
      ...(build.memoryMib ? { memoryMib: Math.max(128, build.memoryMib) } : {}),
    };
  }

  /** Log entries of a build from `offset` (E2B logsOffset). */
  static entries(b: Build, offset = 0): BuildLogEntry[] {
    return b.logs
      .split("\n")
      .filter(Boolean)
      .slice(Math.max(0, offset))
      .map((l) => {
        try {
          return JSON.parse(l) as BuildLogEntry;
        } catch {
          return { timestamp: b.createdAt.toISOString(), level: "info" as const, message: l };
        }
      });
  }

  /** The node that builds `recipe`: placement over the substrate's nodes (unavailable when none can). */
  private async place(recipe: BuildRecipeInput): Promise<string> {
    const work: PlacementWork = {
      templateId: recipe.from.kind === "template" ? recipe.from.name : "",
      vcpu: recipe.vcpu ?? 0,
      memoryMib: recipe.memoryMib ?? 0,
      diskMib: 0,
    };
    const d = decidePlacement(await this.d.nodes.list(nodeCall()), work, { gate: "off" });
    if (d.nodeId === null) throw new SpaceError("unavailable", `no ready node can build templates (${d.explanation})`);
    return d.nodeId;
  }

  private follow(buildId: string): void {
    if (this.following.has(buildId)) return;
    const p = this.followLoop(buildId).finally(() => this.following.delete(buildId));
    this.following.set(buildId, p);
  }

  private async followLoop(buildId: string): Promise<void> {
    let misses = 0;
    while (!this.closed) {
      const b = await getBuild(this.d.db, buildId);
      if (b.status !== "building") return;
      const spec = b.spec as BuildSpecRecord;
      if (!spec.nodeId) return this.fail(buildId, "build has no node", "base");
      let st: NodeBuildStatusWire;
      try {
        st = await this.d.substrate.buildStatus(spec.nodeId, buildId, spec.logsTotal ?? 0, nodeCall());
        misses = 0;
      } catch (e) {
        const err = SpaceError.from(e);
        if (err.code === "not_found" || ++misses > 100) return this.fail(buildId, `the build was lost on node ${spec.nodeId} (node restarted?): ${err.message}`, "base");
        await sleep(1000);
        continue;
      }
      if (st.logEntries.length) {
        await appendBuildLogs(this.d.db, buildId, st.logEntries.map((e) => `${JSON.stringify(e)}\n`).join(""));
        await updateBuild(this.d.db, buildId, { spec: { ...spec, logsTotal: (spec.logsTotal ?? 0) + st.logEntries.length } });
      }
      if (st.status === "ready" && st.result) {
        await this.complete(b, spec, st.result);
        return;
      }
      if (st.status === "failed") {
        await updateBuild(this.d.db, buildId, { status: "failed", error: JSON.stringify({ message: st.error?.message ?? "build failed", step: st.error?.step }) });
        this.#observeFailed(b);
        return;
      }
      await sleep(this.d.pollMs ?? 250);
    }
  }

  private async complete(b: Build, spec: BuildSpecRecord, result: NonNullable<NodeBuildStatusWire["result"]>): Promise<void> {
    // The node's template-id subvolume is what sandboxes of this template boot from.
    await this.d.substrate.pointTemplate(spec.nodeId!, nodeTemplateName(b.templateId), nodeTemplateName(b.id), nodeCall());
    await this.d.db.transaction(async (tx) => {
      await updateBuild(tx, b.id, {
        status: "ready",
        rootfsSizeMib: result.rootfsSizeMib,
        environment: result.environment,
        digest: result.digest,
        spec: {
          ...spec,
          result: { cachedSteps: result.cachedSteps, builtSteps: result.builtSteps, durationMs: result.durationMs, config: result.config, ...(result.imageDigest ? { imageDigest: result.imageDigest, pulledBytes: result.pulledBytes ?? 0 } : {}) },
        },
      });
      const tenantId = spec.tenantId as TenantId;
      for (const tag of new Set(["default", ...spec.tags])) await setRelease(tx, { tenantId, templateId: b.templateId, alias: spec.alias, tag, buildId: b.id });
    });
    this.d.log.info({ buildId: b.id, templateId: b.templateId, alias: spec.alias, ms: result.durationMs }, "template build released");
    const m = this.#metrics();
    m.buildSeconds.observe({ result: "ready" }, result.durationMs / 1000);
    m.cacheSteps.inc({ result: "hit" }, result.cachedSteps);
    m.cacheSteps.inc({ result: "miss" }, result.builtSteps);
    if (result.pulledBytes) m.registryPulledBytes.inc(result.pulledBytes);
  }

  #metrics(): BuildMetrics {
    return this.d.metrics ?? spaceMetrics().builds;
  }

  /** A failed build's time from its start (a build that never started has none). */
  #observeFailed(b: Pick<Build, "startedAt">): void {
    if (b.startedAt) this.#metrics().buildSeconds.observe({ result: "failed" }, (Date.now() - new Date(b.startedAt).getTime()) / 1000);
  }

  private async fail(buildId: string, message: string, step?: string): Promise<void> {
    await appendBuildLogs(this.d.db, buildId, `${JSON.stringify({ timestamp: new Date().toISOString(), level: "error", message, step })}\n`).catch(() => undefined);
    this.#observeFailed(await updateBuild(this.d.db, buildId, { status: "failed", error: JSON.stringify({ message, step }) }));
  }

  /** Removes a template's node subvolumes (best effort; the store is the source of truth). */
  async forgetOnNodes(templateId: string, buildIds: string[]): Promise<void> {
    for (const n of await this.d.nodes.list(nodeCall())) {
      if (n.status !== "ready") continue;
      for (const name of [templateId, ...buildIds].map(nodeTemplateName)) {
        await this.d.substrate
          .dropTemplate(n.id, name, nodeCall())
          .catch((e: unknown) => this.d.log.warn({ err: e, node: n.id, name }, "removing a template from a node failed"));
      }
    }
  }

  // ------------------------------------------------------------------ COPY uploads

  /** An upload URL for COPY files (the SDK PUTs there without its API key): HMAC-signed. */
  uploadToken(templateId: string, hash: string, expiresAtSec: number): string {
    return createHmac("sha256", this.d.internalToken).update(`files\0${templateId}\0${hash}\0${expiresAtSec}`).digest("base64url");
  }
  checkUploadToken(templateId: string, hash: string, expiresAtSec: number, token: string): boolean {
    if (!Number.isFinite(expiresAtSec) || expiresAtSec * 1000 < Date.now()) return false;
    const want = Buffer.from(this.uploadToken(templateId, hash, expiresAtSec));
    const got = Buffer.from(token);
    return want.length === got.length && timingSafeEqual(want, got);
  }
}

/** One node call's deadline (the node-api client applies its own per verb as well). */
const nodeCall = () => AbortSignal.timeout(120_000);

/** E2B's `fromImageRegistry` (TemplateBuildStartV2): what `fromImage(image, creds)`, `fromGCPRegistry` and `fromAWSRegistry` send. */
const FromImageRegistry = z.discriminatedUnion("type", [
  z.object({ type: z.literal("registry"), username: z.string().min(1), password: z.string().min(1) }),
  z.object({ type: z.literal("gcp"), serviceAccountJson: z.string().min(1) }),
  z.object({ type: z.literal("aws"), awsAccessKeyId: z.string().min(1), awsSecretAccessKey: z.string().min(1), awsRegion: z.string().min(1) }),
]);

/**
 * The credentials of one pull of `image`, or undefined; 400 naming `fromImageRegistry` when
 * malformed, 403 when AWS refuses the keys (exchanged for an ECR token at `ecrEndpoint`, "" = the region's).
 */
export async function registryAuth(raw: unknown, image: string, ecrEndpoint: string): Promise<RegistryAuth | undefined> {
  if (raw === undefined || raw === null) return undefined;
  const r = FromImageRegistry.safeParse(raw);
  if (!r.success) {
    throw invalid(
      `fromImageRegistry is not valid: ${r.error.issues[0]?.path.join(".") || "type"} ${r.error.issues[0]?.message ?? ""} (type registry with username and password, gcp with serviceAccountJson, or aws with awsAccessKeyId, awsSecretAccessKey and awsRegion)`.trim(),
      { field: "fromImageRegistry" },
    );
  }
  switch (r.data.type) {
    case "registry":
      return { username: r.data.username, password: r.data.password };
    case "gcp":
      // Artifact Registry and GCR accept a service account key as basic auth under `_json_key`.
      return { username: "_json_key", password: r.data.serviceAccountJson };
    case "aws":
      return ecrRegistryAuth(r.data, image, ecrEndpoint, AbortSignal.timeout(20_000));
  }
}

/** The request as stored on the build: registry credentials never in clear. */
function redactRequest(body: TemplateBuildStart): TemplateBuildStart {
  if (body.fromImageRegistry === undefined) return body;
  const type = (body.fromImageRegistry as { type?: unknown } | null)?.type;
  return { ...body, fromImageRegistry: { type: typeof type === "string" ? type : "unknown", redacted: true } };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The stored error of a failed build: `{message, step}` JSON (older rows: plain text). */
export function buildError(b: Build): { message: string; step?: string } | undefined {
  if (!b.error) return undefined;
  try {
    const j = JSON.parse(b.error) as { message?: string; step?: string };
    if (typeof j.message === "string") return { message: j.message, ...(j.step ? { step: j.step } : {}) };
  } catch {
    /* plain text */
  }
  return { message: b.error };
}
