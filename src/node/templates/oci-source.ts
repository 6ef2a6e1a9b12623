/**
 * OCI image sources for template builds, through the OCI tools Debian ships: `skopeo`
 * normalises any local transport (oci-archive, oci layout, docker-archive from `docker
 * save`) into an OCI layout, and `umoci raw unpack` applies its layers in order into the
 * rootfs (whiteouts and opaque directories honoured). `oci://<path>[:tag][@digest]` names a
 * layout directory or an archive by what is at the path. This file reads local images only;
 * registry images come through registry-source.ts into a shared layout read the same way.
 */
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { exec, ExecError } from "../../core/exec.ts";
import { invalid, SpaceError } from "../../core/errors.ts";
import { IMAGE_TRANSPORTS, parseOciRef } from "../../contract/build-recipe.ts";

export interface OciImageConfig {
  Env?: string[] | null;
  WorkingDir?: string;
  User?: string;
  Cmd?: string[] | null;
  Entrypoint?: string[] | null;
}

export interface NormalizedImage {
  /** `sha256:<hex>` of the image manifest: the image's identity (the first cache key). */
  manifestDigest: string;
  config: OciImageConfig;
  /** `<layout>:<tag>` for umoci. */
  umociRef: string;
}

/** Refuses anything that is not a local image: a skopeo transport or `oci://` (registry images come through registry-source.ts). */
export function checkImageRef(ref: string): void {
  if (ref.startsWith("oci://") ? !parseOciRef(ref) : !IMAGE_TRANSPORTS.some((t) => ref.startsWith(t))) {
    throw invalid(`image ${JSON.stringify(ref)} is not a local image: use oci://<path>[:tag][@sha256:digest], oci-archive:<path>, oci:<dir>[:tag] or docker-archive:<path>`, { field: "fromImage" });
  }
}

/**
 * The skopeo source of an `oci://` reference: `oci:<dir>[:tag]` for a layout directory,
 * `oci-archive:<file>[:tag]` for an archive. A digest names the layout's manifest by its
 * descriptor (its tag, or the layout's only manifest); `normalizeImage` checks the copy has it.
 */
async function ociSource(ref: string): Promise<{ source: string; digest?: string }> {
  const r = parseOciRef(ref)!;
  const s = await stat(r.path).catch(() => undefined);
  if (!s) throw invalid(`image ${ref}: no OCI layout or archive at ${r.path} on the node`, { field: "fromImage" });
  if (s.isFile()) return { source: `oci-archive:${r.path}${r.tag ? `:${r.tag}` : ""}`, ...(r.digest ? { digest: r.digest } : {}) };
  if (!s.isDirectory()) throw invalid(`image ${ref}: ${r.path} is neither an OCI layout directory nor an archive`, { field: "fromImage" });
  const index = await readFile(join(r.path, "index.json"), "utf8")
    .then((t) => JSON.parse(t) as { manifests?: Array<{ digest?: string; annotations?: Record<string, string> }> })
    .catch(() => undefined);
  if (!index) throw invalid(`image ${ref}: ${r.path} is not an OCI layout (no readable index.json)`, { field: "fromImage" });
  if (!r.digest) return { source: `oci:${r.path}${r.tag ? `:${r.tag}` : ""}` };
  const manifests = index.manifests ?? [];
  const desc = manifests.find((m) => m.digest === r.digest && (!r.tag || m.annotations?.[REF_NAME] === r.tag));
  if (!desc) throw invalid(`image ${ref}: the layout at ${r.path} has no manifest ${r.digest}${r.tag ? ` tagged ${r.tag}` : ""}`, { field: "fromImage" });
  const tag = desc.annotations?.[REF_NAME];
  if (!tag && manifests.length > 1) throw invalid(`image ${ref}: manifest ${r.digest} is untagged in a layout of ${manifests.length}; tag it, or name it by tag`, { field: "fromImage" });
  return { source: `oci:${r.path}${tag ? `:${tag}` : ""}`, digest: r.digest };
}

const REF_NAME = "org.opencontainers.image.ref.name";

/** Copies `ref` into the OCI layout `layoutDir` under tag `img`, and reads its manifest and config. */
export async function normalizeImage(ref: string, layoutDir: string, signal: AbortSignal): Promise<NormalizedImage> {
  checkImageRef(ref);
  const { source, digest } = ref.startsWith("oci://") ? await ociSource(ref) : { source: ref, digest: undefined };
  try {
    await exec("skopeo", ["--insecure-policy", "copy", "--quiet", source, `oci:${layoutDir}:img`], { timeoutMs: 30 * 60_000, signal });
  } catch (e) {
    if (e instanceof ExecError) throw new SpaceError("invalid_argument", `cannot read image ${ref}: ${e.result.stderr.trim().slice(-500) || e.message}`, { details: { field: "fromImage" } });
    throw e;
  }
  const img = await readLayoutImage(layoutDir, "img", ref);
  if (digest && img.manifestDigest !== digest) throw invalid(`image ${ref}: it holds manifest ${img.manifestDigest}, not ${digest}`, { field: "fromImage" });
  return img;
}

/** The manifest and config of tag `tag` in the OCI layout `layoutDir`; `ref` names the image in errors. */
export async function readLayoutImage(layoutDir: string, tag: string, ref: string): Promise<NormalizedImage> {
  const index = JSON.parse(await readFile(join(layoutDir, "index.json"), "utf8")) as { manifests: Array<{ digest: string; annotations?: Record<string, string> }> };
  const desc = index.manifests.find((m) => m.annotations?.[REF_NAME] === tag);
  if (!desc) throw invalid(`image ${ref} has no manifest`);
  const manifest = JSON.parse(await readFile(blobPath(layoutDir, desc.digest), "utf8")) as { config: { digest: string } };
  const cfg = JSON.parse(await readFile(blobPath(layoutDir, manifest.config.digest), "utf8")) as { config?: OciImageConfig; architecture?: string; os?: string };
  if (cfg.os && cfg.os !== "linux") throw invalid(`image ${ref} is for ${cfg.os}, not linux`);
  if (cfg.architecture && cfg.architecture !== "amd64" && process.arch === "x64") throw invalid(`image ${ref} is for ${cfg.architecture}; this node runs amd64`);
  return { manifestDigest: desc.digest, config: cfg.config ?? {}, umociRef: `${layoutDir}:${tag}` };
}

/** Unpacks the image's layers into `rootfs` (an existing empty directory). */
export async function unpackImage(img: NormalizedImage, rootfs: string, signal: AbortSignal): Promise<void> {
  try {
    await exec("umoci", ["raw", "unpack", "--image", img.umociRef, rootfs], { timeoutMs: 30 * 60_000, signal });
  } catch (e) {
    if (e instanceof ExecError) throw new SpaceError("invalid_argument", `cannot unpack image: ${e.result.stderr.trim().slice(-500) || e.message}`);
    throw e;
  }
}

function blobPath(layout: string, digest: string): string {
  const [alg, hex] = digest.split(":");
  if (!alg || !hex || !/^[a-f0-9]+$/.test(hex)) throw invalid(`bad digest ${digest} in image layout`);
  return join(layout, "blobs", alg, hex);
}
