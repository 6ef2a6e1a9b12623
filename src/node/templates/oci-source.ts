/**
 * OCI image sources for template builds, through the OCI tools Debian ships: `skopeo`
 * normalises any local transport (oci-archive, oci layout, docker-archive from `docker
 * save`) into an OCI layout, and `umoci raw unpack` applies its layers in order into the
 * rootfs (whiteouts and opaque directories honoured). This file reads local images only;
 * registry images come through registry-source.ts into a shared layout read the same way.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { exec, ExecError } from "../../core/exec.ts";
import { invalid, SpaceError } from "../../core/errors.ts";
import { IMAGE_TRANSPORTS } from "../../contract/build-recipe.ts";

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

/** Refuses anything that is not a local skopeo transport (registries are unreachable here). */
export function checkImageRef(ref: string): void {
  if (!IMAGE_TRANSPORTS.some((t) => ref.startsWith(t))) {
    throw invalid(
      `image ${JSON.stringify(ref)} is not a local image: use oci-archive:<path>, oci:<dir>[:tag] or docker-archive:<path> (registries are not reachable from SPACE nodes)`,
    );
  }
}

/** Copies `ref` into the OCI layout `layoutDir` under tag `img`, and reads its manifest and config. */
export async function normalizeImage(ref: string, layoutDir: string, signal: AbortSignal): Promise<NormalizedImage> {
  checkImageRef(ref);
  try {
    await exec("skopeo", ["--insecure-policy", "copy", "--quiet", ref, `oci:${layoutDir}:img`], { timeoutMs: 30 * 60_000, signal });
  } catch (e) {
    if (e instanceof ExecError) throw new SpaceError("invalid_argument", `cannot read image ${ref}: ${e.result.stderr.trim().slice(-500) || e.message}`);
    throw e;
  }
  return readLayoutImage(layoutDir, "img", ref);
}

/** The manifest and config of tag `tag` in the OCI layout `layoutDir`; `ref` names the image in errors. */
export async function readLayoutImage(layoutDir: string, tag: string, ref: string): Promise<NormalizedImage> {
  const index = JSON.parse(await readFile(join(layoutDir, "index.json"), "utf8")) as { manifests: Array<{ digest: string; annotations?: Record<string, string> }> };
  const desc = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === tag);
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
