/**
 * Local OCI registries for the registry template tests: Debian's `docker-registry`
 * (distribution 2.8, installed by scripts/setup/registry.sh) on 127.0.0.1, one instance
 * open and one behind htpasswd basic auth (`htpasswd -B`), optionally over TLS with a
 * certificate the test made, each with its own storage in a
 * temporary directory, stopped (SIGTERM, then SIGKILL) by `stop`. Images are pushed with
 * skopeo.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { exec } from "../../src/core/exec.ts";
import { freePort } from "./stack.ts";
import { waitFor } from "./wait.ts";

export interface LocalRegistry {
  /** `127.0.0.1:<port>`. */
  host: string;
  /** Credentials of the basic-auth instance. */
  auth?: { username: string; password: string };
  /** Copies a skopeo source (`oci:<layout>:<tag>`, `oci-archive:<path>`) to `<host>/<repoTag>`. */
  push(source: string, repoTag: string): Promise<void>;
  stop(): Promise<void>;
}

/** Why these tests cannot run here (the command that fixes it), or false. */
export function localRegistrySkipReason(): string | false {
  for (const tool of ["docker-registry", "htpasswd", "skopeo"]) {
    if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) return `${tool} is not installed (bash scripts/setup/registry.sh)`;
  }
  return false;
}

export async function startLocalRegistry(opts: { auth?: { username: string; password: string }; tls?: { cert: string; key: string } } = {}): Promise<LocalRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "space-registry-"));
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const tls = opts.tls ? `, tls: { certificate: ${JSON.stringify(opts.tls.cert)}, key: ${JSON.stringify(opts.tls.key)} }` : "";
  const lines = ["version: 0.1", "log: { level: warn }", `storage: { filesystem: { rootdirectory: ${JSON.stringify(join(dir, "data"))} }, delete: { enabled: true } }`, `http: { addr: ${JSON.stringify(host)}${tls} }`];
  if (opts.auth) {
    const hash = spawnSync("htpasswd", ["-Bbn", opts.auth.username, opts.auth.password], { encoding: "utf8" });
    if (hash.status !== 0) throw new Error(`htpasswd failed: ${hash.stderr}`);
    await writeFile(join(dir, "htpasswd"), hash.stdout.trim() + "\n");
    lines.push(`auth: { htpasswd: { realm: space-test, path: ${JSON.stringify(join(dir, "htpasswd"))} } }`);
  }
  await writeFile(join(dir, "config.yml"), lines.join("\n") + "\n");
  const child: ChildProcess = spawn("docker-registry", ["serve", join(dir, "config.yml")], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const exited = new Promise<void>((res) => child.once("exit", () => res()));
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`docker-registry exited: ${stderr}`);
      // `-k`: the test's own CA signed a TLS instance's certificate; this only waits for it to answer.
      const r = await exec("curl", ["-sk", "-o", "/dev/null", "-w", "%{http_code}", `${opts.tls ? "https" : "http"}://${host}/v2/`], { timeoutMs: 5_000, allowFailure: true });
      return r.stdout === "200" || r.stdout === "401";
    },
    `docker-registry on ${host}`,
    30_000,
  );
  const creds = opts.auth ? ["--dest-creds", `${opts.auth.username}:${opts.auth.password}`] : [];
  return {
    host,
    ...(opts.auth ? { auth: opts.auth } : {}),
    async push(source, repoTag) {
      await exec("skopeo", ["--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", ...creds, source, `docker://${host}/${repoTag}`], { timeoutMs: 120_000 });
    },
    async stop() {
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        const t = setTimeout(() => child.kill("SIGKILL"), 5_000);
        await exited;
        clearTimeout(t);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
