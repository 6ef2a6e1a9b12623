/**
 * Registry images for template builds, pulled with skopeo. `resolve` asks the registry
 * which manifest a reference names now (`skopeo inspect --raw`; the digest is the sha256 of
 * those bytes) before the build starts, so a refusal (unauthorized, not found,
 * unreachable) answers the build request itself, within the inspect timeout. `pull` copies
 * `image@digest` into one OCI layout per node shared by every build: skopeo writes only
 * the blobs the layout lacks, so templates on one base fetch each layer once; the bytes of
 * the new blobs are what the pull fetched.
 *
 * Credentials never reach argv, logs or errors: each call gets a 0600 auth file (the
 * operator's entries plus the build's own) removed after. Insecure registries and mirrors
 * come from a registries.conf written from the operator's settings; the operator's CA
 * bundle is the certificate directory every call trusts besides the system's.
 */
import { createHash } from "node:crypto";
import { copyFile, mkdir, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { exec, ExecError } from "../../core/exec.ts";
import { invalid, SpaceError } from "../../core/errors.ts";
import { randomId } from "../../core/ids.ts";
import { parseRegistryRef, type RegistryAuth, type RegistryRef } from "../../contract/build-recipe.ts";
import { readLayoutImage, type NormalizedImage } from "./oci-source.ts";
import { authFileFor, registriesConf, type RegistrySettings } from "./registry-config.ts";

export interface RegistrySourceOptions extends RegistrySettings {
  /** Node directory for the shared layout, registries.conf, certificates and per-call auth files. */
  dir: string;
  /** The operator's containers-auth.json (SPACE_REGISTRY_AUTH_FILE); absent = none. */
  authFile?: string;
  /** The operator's PEM bundle (SPACE_EXTRA_CA_CERTS), trusted besides the system's CAs. */
  caBundle?: string;
  /** How long asking a registry for a manifest may take (an unreachable one fails then). */
  inspectTimeoutMs: number;
  /** Environment of skopeo (the proxy variables an operator set). */
  env: NodeJS.ProcessEnv;
}

export interface PulledImage {
  image: NormalizedImage;
  /** Bytes of blobs this pull wrote to the shared layout (0 when every blob was there). */
  pulledBytes: number;
  /** Blobs written and blobs already present. */
  fetchedBlobs: number;
  reusedBlobs: number;
}

/** What a failed skopeo call means for the user (pure; unit-tested). */
export function classifyRegistryError(stderr: string, r: RegistryRef, image: string, withAuth: boolean, secrets: readonly string[] = []): SpaceError {
  const answer = registryAnswer(stderr, secrets);
  const host = r.registry;
  if (/unauthorized|authentication required|denied|forbidden|\b40[13]\b/i.test(answer)) {
    return new SpaceError(
      "permission_denied",
      withAuth
        ? `registry ${host} refused the credentials given for ${image}: ${answer}`
        : `registry ${host} refused ${image} without credentials: ${answer} (pass fromImage(image, { username, password }) or set SPACE_REGISTRY_AUTH_FILE)`,
      { details: { field: "fromImageRegistry" } },
    );
  }
  if (/manifest unknown|name unknown|not found|\b404\b/i.test(answer)) {
    return invalid(`image ${image} not found in registry ${host}: ${answer}`, { field: "fromImage" });
  }
  if (/x509|certificate/i.test(answer)) {
    return invalid(`registry ${host} presented a certificate SPACE does not trust (${answer}); the operator can add its CA with SPACE_EXTRA_CA_CERTS`, { field: "fromImage" });
  }
  if (/server gave HTTP response to HTTPS client/i.test(answer)) {
    return invalid(`registry ${host} speaks plain HTTP; the operator can allow it with SPACE_REGISTRY_INSECURE=${host}`, { field: "fromImage" });
  }
  if (/connection refused|no such host|i\/o timeout|timeout|deadline|unreachable|no route|connection reset|EOF|context canceled/i.test(answer)) {
    return invalid(`registry ${host} is unreachable for ${image}: ${answer}`, { field: "fromImage" });
  }
  return invalid(`cannot pull ${image} from registry ${host}: ${answer || "no answer"}`, { field: "fromImage" });
}

/** The registry's own words from skopeo's stderr: the last fatal message without skopeo's wrapping or any secret. */
export function registryAnswer(stderr: string, secrets: readonly string[] = []): string {
  const lines = stderr.split("\n").map((l) => l.trim()).filter(Boolean);
  const last = lines.at(-1) ?? "";
  let msg = /msg="((?:[^"\\]|\\.)*)"/.exec(last)?.[1]?.replace(/\\"/g, '"') ?? last;
  msg = msg.replace(/^Error parsing image name "[^"]*": /, "").replace(/^(initializing source|reading manifest|pinging container registry) [^:]*(?::\d+)?[^:]*: /, "");
  msg = msg.replace(/\/\/[^/@\s]*@/g, "//");
  for (const s of secrets) if (s.length >= 3) msg = msg.split(s).join("***");
  return msg.slice(0, 300);
}

export class RegistrySource {
  private readonly o: RegistrySourceOptions;
  private readonly layout: string;
  private prepared: Promise<void> | undefined;
  /** Copies into the shared layout and reads from it one at a time (index.json is rewritten by each copy). */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(o: RegistrySourceOptions) {
    this.o = o;
    this.layout = join(o.dir, "layout");
  }

  /** The digest `image` names now in its registry, or the one it names itself once the registry has it (refusals classified, secrets scrubbed). */
  async resolve(image: string, auth: RegistryAuth | undefined, signal: AbortSignal): Promise<string> {
    const ref = this.ref(image);
    // A digest reference is asked for too: an unknown digest or a refusal answers the request, not the build later.
    const r = await this.skopeo(ref, image, auth, (authFile) => ["inspect", "--raw", "--retry-times", "0", "--authfile", authFile, ...this.certArgs("--cert-dir"), image], this.o.inspectTimeoutMs, signal);
    return ref.digest ?? `sha256:${createHash("sha256").update(r.stdout).digest("hex")}`;
  }

  /** Copies `image@digest` into the shared layout, then hands its normalized form to `use` (no other copy meanwhile). */
  async pull<T>(image: string, digest: string, auth: RegistryAuth | undefined, signal: AbortSignal, use: (p: PulledImage) => Promise<T>): Promise<T> {
    const ref = this.ref(image);
    const pinned = `docker://${ref.registry}/${ref.repository}@${digest}`;
    const tag = `digest-${digest.slice("sha256:".length)}`;
    const run = this.queue.then(async () => {
      await mkdir(this.layout, { recursive: true });
      const before = await this.blobs();
      // Bounded by the build's deadline (signal): a large image may take long; a refused or unknown one already failed in resolve.
      await this.skopeo(
        ref,
        image,
        auth,
        (authFile) => ["--insecure-policy", "copy", "--quiet", "--retry-times", "2", "--src-authfile", authFile, ...this.certArgs("--src-cert-dir"), pinned, `oci:${this.layout}:${tag}`],
        24 * 60 * 60_000,
        signal,
      );
      const after = await this.blobs();
      let pulledBytes = 0;
      let fetchedBlobs = 0;
      for (const [name, size] of after) {
        if (before.has(name)) continue;
        pulledBytes += size;
        fetchedBlobs++;
      }
      const img = await readLayoutImage(this.layout, tag, image);
      return use({ image: img, pulledBytes, fetchedBlobs, reusedBlobs: after.size - fetchedBlobs });
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  private ref(image: string): RegistryRef {
    const ref = parseRegistryRef(image);
    if (!ref) throw invalid(`image ${JSON.stringify(image)} is not a registry reference`, { field: "fromImage" });
    return ref;
  }

  private certArgs(flag: string): string[] {
    return this.o.caBundle ? [flag, join(this.o.dir, "certs")] : [];
  }

  /** registries.conf and the certificate directory, written once per process from the operator's settings. */
  private prepare(): Promise<void> {
    this.prepared ??= (async () => {
      // Auth files a killed agent left behind hold credentials: none survives a restart.
      await rm(join(this.o.dir, "auth"), { recursive: true, force: true });
      await mkdir(join(this.o.dir, "auth"), { recursive: true, mode: 0o700 });
      await writeFile(join(this.o.dir, "registries.conf"), registriesConf(this.o));
      if (this.o.caBundle) {
        await rm(join(this.o.dir, "certs"), { recursive: true, force: true });
        await mkdir(join(this.o.dir, "certs"), { recursive: true });
        await copyFile(this.o.caBundle, join(this.o.dir, "certs", "space-extra-ca.crt"));
      }
    })().catch((e: unknown) => {
      this.prepared = undefined;
      throw e;
    });
    return this.prepared;
  }

  private async skopeo(ref: RegistryRef, image: string, auth: RegistryAuth | undefined, args: (authFile: string) => string[], timeoutMs: number, signal: AbortSignal) {
    await this.prepare();
    let operator: string | undefined;
    if (this.o.authFile) {
      operator = await readFile(this.o.authFile, "utf8").catch((e: unknown) => {
        throw new SpaceError("failed_precondition", `SPACE_REGISTRY_AUTH_FILE ${this.o.authFile} cannot be read: ${(e as NodeJS.ErrnoException).code ?? "error"}`);
      });
    }
    let content: string;
    try {
      content = authFileFor(operator, ref.registry, auth);
    } catch {
      throw new SpaceError("failed_precondition", `SPACE_REGISTRY_AUTH_FILE ${this.o.authFile} is not a containers-auth.json file`);
    }
    const authFile = join(this.o.dir, "auth", `${randomId(12)}.json`);
    await writeFile(authFile, content, { mode: 0o600 });
    try {
      // skopeo 1.9 reads --registries-conf (not CONTAINERS_REGISTRIES_CONF).
      return await exec("skopeo", ["--registries-conf", join(this.o.dir, "registries.conf"), "--command-timeout", `${Math.ceil(timeoutMs / 1000)}s`, ...args(authFile)], {
        timeoutMs: timeoutMs + 5_000,
        signal,
        env: this.o.env,
      });
    } catch (e) {
      if (e instanceof ExecError) {
        const stderr = e.result.timedOut ? "i/o timeout" : e.result.stderr;
        throw classifyRegistryError(stderr, ref, image, Boolean(auth), auth ? [auth.password] : []);
      }
      throw e;
    } finally {
      await rm(authFile, { force: true });
    }
  }

  private async blobs(): Promise<Map<string, number>> {
    const dir = join(this.layout, "blobs", "sha256");
    const out = new Map<string, number>();
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const s = await stat(join(dir, name)).catch(() => undefined);
      if (s?.isFile()) out.set(name, s.size);
    }
    return out;
  }
}
