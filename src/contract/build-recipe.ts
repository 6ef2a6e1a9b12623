/**
 * A build recipe: where the rootfs comes from and the steps applied to it (a Dockerfile
 * subset). The control plane turns what a client sent (E2B's TemplateBuildStartV2, a
 * Dockerfile from `space template build`, Native JSON) into one of these; the node's
 * TemplateBuilder executes it. One schema, used on both sides of node-api.
 */
import { createHash } from "node:crypto";
import { z } from "zod";

/** `oci-archive:<path>[:ref]`, `oci:<dir>[:ref]`, `docker-archive:<path>`: skopeo transports of local images. */
export const IMAGE_TRANSPORTS = ["oci-archive:", "oci:", "docker-archive:"] as const;

/** `oci://<absolute path>[:tag][@sha256:<hex>]`: an OCI layout directory or an OCI archive on the node. */
export interface OciRef {
  path: string;
  tag?: string;
  digest?: string;
}

/** Parses an `oci://` reference; undefined when it is not one or is malformed (a relative path, a bad tag or digest). */
export function parseOciRef(input: string): OciRef | undefined {
  if (!input.startsWith("oci://")) return undefined;
  const split = splitTagAndDigest(input.slice("oci://".length));
  if (!split) return undefined;
  const { rest, tag, digest } = split;
  if (!rest.startsWith("/") || rest.includes("\0") || rest.split("/").includes("..")) return undefined;
  return { path: rest, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

/** An image in a registry, as a Docker reference names it. */
export interface RegistryRef {
  /** `docker.io`, `ghcr.io`, `127.0.0.1:5000`. */
  registry: string;
  /** `library/python`, `team/app`. */
  repository: string;
  tag?: string;
  /** `sha256:<hex>`. */
  digest?: string;
}

const REF_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const REF_HOST = /^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*:\d{1,5}|\[[0-9a-fA-F:]+\](?::\d{1,5})?)$/;
const REF_TAG = /^[\w][\w.-]{0,127}$/;
const REF_DIGEST = /^sha256:[a-f0-9]{64}$/;

/** `name[:tag][@sha256:…]` → its parts; undefined when the tag or digest is malformed. */
function splitTagAndDigest(ref: string): { rest: string; tag?: string; digest?: string } | undefined {
  let rest = ref;
  let digest: string | undefined;
  const at = rest.lastIndexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!REF_DIGEST.test(digest)) return undefined;
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!REF_TAG.test(tag)) return undefined;
  }
  return { rest, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

/**
 * Parses a registry image reference as the e2b SDKs send it (`python:3.12`,
 * `127.0.0.1:5000/team/app:v1`, `ghcr.io/x/y@sha256:…`, with or without `docker://`), with
 * Docker's defaults (`docker.io`, `library/`, `latest`); undefined when it is not one (pure).
 */
export function parseRegistryRef(input: string): RegistryRef | undefined {
  const split = splitTagAndDigest(input.startsWith("docker://") ? input.slice("docker://".length) : input);
  if (!split) return undefined;
  const { rest, tag, digest } = split;
  const parts = rest.split("/");
  let registry = "docker.io";
  const first = parts[0] ?? "";
  if (parts.length > 1 && (first.includes(".") || first.includes(":") || first === "localhost" || first.startsWith("["))) {
    if (!REF_HOST.test(first)) return undefined;
    registry = first;
    parts.shift();
  }
  if (registry === "index.docker.io") registry = "docker.io";
  if (!parts.length || !parts.every((p) => REF_COMPONENT.test(p))) return undefined;
  if (registry === "docker.io" && parts.length === 1) parts.unshift("library");
  const repository = parts.join("/");
  if (repository.length > 255) return undefined;
  return { registry, repository, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}), ...(tag === undefined && digest === undefined ? { tag: "latest" } : {}) };
}

/** `docker://registry/repository[:tag][@digest]`: skopeo's reference of `r`. */
export function formatRegistryRef(r: RegistryRef): string {
  return `docker://${r.registry}/${r.repository}${r.tag !== undefined ? `:${r.tag}` : ""}${r.digest !== undefined ? `@${r.digest}` : ""}`;
}

/** Credentials of one pull (E2B's `fromImage(image, { username, password })`): held in memory, never logged or stored. */
export const RegistryAuth = z.object({ username: z.string().min(1), password: z.string().min(1) });
export type RegistryAuth = z.infer<typeof RegistryAuth>;

export const BuildSource = z.discriminatedUnion("kind", [
  /** A local OCI image (archive or layout; a skopeo transport or `oci://`) on the node, unpacked with umoci (whiteouts honoured). */
  z.object({ kind: z.literal("image"), ref: z.string().min(1) }),
  /**
   * An image in a registry (`docker://host/repo:tag`), pulled by skopeo into the node's
   * shared layout. The node pins it to `digest` before the build starts (the digest the
   * reference resolved to), so every layer comes from that one manifest.
   */
  z.object({ kind: z.literal("registry"), image: z.string().startsWith("docker://"), digest: z.string().regex(/^sha256:[a-f0-9]{64}$/).optional(), auth: RegistryAuth.optional() }),
  /** A template already in the node cache (`base`, or a build's node name). */
  z.object({ kind: z.literal("template"), name: z.string().min(1) }),
  /** A rootfs tarball on the node. */
  z.object({ kind: z.literal("rootfs-tar"), path: z.string().min(1) }),
]);
export type BuildSource = z.infer<typeof BuildSource>;

const force = z.boolean().optional();
export const BuildStep = z.discriminatedUnion("type", [
  z.object({ type: z.literal("RUN"), cmd: z.string().min(1), user: z.string().optional(), force }),
  z.object({
    type: z.literal("COPY"),
    src: z.string().min(1),
    dest: z.string().min(1),
    /** Content hash of the uploaded files (cache key) and the blob holding their tar(.gz). */
    filesHash: z.string().min(1),
    blobKey: z.string().min(1),
    user: z.string().optional(),
    /** Octal mode, e.g. "0755". */
    mode: z.string().regex(/^0?[0-7]{3,4}$/).optional(),
    force,
  }),
  z.object({ type: z.literal("ENV"), env: z.record(z.string(), z.string()), force }),
  z.object({ type: z.literal("WORKDIR"), path: z.string().min(1), force }),
  z.object({ type: z.literal("USER"), user: z.string().min(1), force }),
]);
export type BuildStep = z.infer<typeof BuildStep>;

export const BuildRecipe = z.object({
  from: BuildSource,
  steps: z.array(BuildStep).default([]),
  /** Started in every sandbox of the template after envd is up. */
  startCmd: z.string().optional(),
  /** Exits 0 once the start command is ready. */
  readyCmd: z.string().optional(),
  /** Checkpoint the template once its start command is ready; sandboxes restore from it (capture.ts). */
  capture: z.boolean().default(false),
  /** Rebuild every step regardless of the cache. */
  force: z.boolean().default(false),
  /** Network policy of the build sandbox. */
  allowInternetAccess: z.boolean().default(true),
  /** Build sandbox resources. */
  vcpu: z.number().int().positive().default(2),
  memoryMib: z.number().int().min(128).default(2048),
  /** No output from a RUN step for this long fails the build (watchdog). */
  noOutputTimeoutMs: z.number().int().positive().default(10 * 60_000),
  /** The whole build's deadline. */
  deadlineMs: z.number().int().positive().default(60 * 60_000),
});
export type BuildRecipe = z.infer<typeof BuildRecipe>;
export type BuildRecipeInput = z.input<typeof BuildRecipe>;

/** What a layer's steps have set so far (carried from layer to layer). */
export interface LayerConfig {
  env: Record<string, string>;
  workdir: string;
  user: string;
}

/** Cache key of the first layer: the source's identity (a content digest where it has one). */
export function sourceKey(sourceDigest: string): string {
  return sha256(`source\0${sourceDigest}`);
}

/**
 * Cache key of a step's layer: its parent's key and the step's inputs (for COPY the files'
 * content hash, not the blob key, so a re-upload of the same files hits the cache).
 * `force` is not an input: forcing rebuilds a step, it does not name a different one.
 */
export function stepKey(parentKey: string, step: BuildStep): string {
  const { force: _force, ...rest } = step;
  // `copy: 2`: COPY takes its source as E2B's builder does (the path before the glob); a
  // layer a node cached under the earlier reading must not be reused.
  const inputs = rest.type === "COPY" ? { ...rest, blobKey: undefined, copy: 2 } : rest;
  return sha256(`${parentKey}\0${canonical(inputs)}`);
}

/** One-line description of a step for logs. */
export function describeStep(step: BuildStep): string {
  switch (step.type) {
    case "RUN":
      return `RUN ${step.cmd}${step.user ? ` (as ${step.user})` : ""}`;
    case "COPY":
      return `COPY ${step.src} ${step.dest}`;
    case "ENV":
      return `ENV ${Object.entries(step.env)
        .map(([k, v]) => `${k}=${v}`)
        .join(" ")}`;
    case "WORKDIR":
      return `WORKDIR ${step.path}`;
    case "USER":
      return `USER ${step.user}`;
  }
}

/** The config after `step` (pure; unit-tested). Relative WORKDIRs resolve against the current one. */
export function applyConfig(c: LayerConfig, step: BuildStep): LayerConfig {
  switch (step.type) {
    case "ENV":
      return { ...c, env: { ...c.env, ...expandEnv(step.env, c.env) } };
    case "WORKDIR":
      return { ...c, workdir: resolveWorkdir(c.workdir, step.path) };
    case "USER":
      return { ...c, user: step.user };
    default:
      return c;
  }
}

export function resolveWorkdir(current: string, path: string): string {
  const joined = path.startsWith("/") ? path : `${current.replace(/\/+$/, "")}/${path}`;
  const parts: string[] = [];
  for (const p of joined.split("/")) {
    if (!p || p === ".") continue;
    if (p === "..") parts.pop();
    else parts.push(p);
  }
  return `/${parts.join("/")}`;
}

/** `$VAR` / `${VAR}` in ENV values expand against the env so far (Dockerfile semantics). */
function expandEnv(env: Record<string, string>, prev: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    out[k] = v.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (_m, a: string | undefined, b: string | undefined) => prev[(a ?? b)!] ?? "");
  }
  return out;
}

/** OCI image config → the first layer's config. */
export function configFromImage(cfg: { Env?: string[] | null; WorkingDir?: string; User?: string } | undefined): LayerConfig {
  const env: Record<string, string> = {};
  for (const kv of cfg?.Env ?? []) {
    const i = kv.indexOf("=");
    if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return { env, workdir: cfg?.WorkingDir || "/", user: cfg?.User || "root" };
}

export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonical(x)}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

export const sha256 = (s: string | Buffer) => createHash("sha256").update(s).digest("hex");

/** The node-cache name of a build (node template names are `[a-z0-9][a-z0-9._-]*`). */
export function nodeTemplateName(buildId: string): string {
  return buildId.toLowerCase().replace(/[^a-z0-9.-]/g, "-");
}
