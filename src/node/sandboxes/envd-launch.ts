/**
 * How a sandbox's init (envd) is started: from the bundle's V8 startup snapshot
 * (dist/envd/envd.blob, scripts/build-envd.mjs) when it was built by the very Node.js
 * mounted into the sandbox, else from the ESM bundle. A snapshot from another Node.js
 * build would make node refuse to start, so the build records its version beside it.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../../core/log.ts";
import { exec } from "../../core/exec.ts";

/** Where the node binary and the envd bundle are mounted inside a sandbox. */
export const NODE_MOUNT = "/opt/space/bin/node";
export const ENVD_MOUNT = "/opt/space/envd";

export type EnvdLaunch = { kind: "snapshot" | "bundle"; argv: (port: number) => string[] };

/**
 * V8's for every envd. No memory reducer: it runs full GCs on an isolate that went idle
 * (three, seconds apart) to shrink a heap of a few MB, and a node holds hundreds of idle
 * envds, each also just started or restored: 12 ms of CPU per envd in its first 40 s
 * on the host, none without it (`/proc/<pid>/schedstat`, one command, then idle).
 */
export const ENVD_NODE_FLAGS = ["--no-memory-reducer"];

const SNAPSHOT: EnvdLaunch = { kind: "snapshot", argv: (port) => [NODE_MOUNT, ...ENVD_NODE_FLAGS, "--snapshot-blob", `${ENVD_MOUNT}/envd.blob`, "--", "--port", String(port)] };
export const BUNDLE: EnvdLaunch = { kind: "bundle", argv: (port) => [NODE_MOUNT, ...ENVD_NODE_FLAGS, `${ENVD_MOUNT}/envd.mjs`, "--port", String(port)] };

/** The node version a snapshot was built by (`envd.blob.json`), or undefined without a readable record (then the bundle). */
async function snapshotNodeVersion(envdDir: string): Promise<string | undefined> {
  const meta = await readFile(join(envdDir, "envd.blob.json"), "utf8").catch(() => undefined);
  if (meta === undefined) return undefined;
  try {
    const v = (JSON.parse(meta) as { node?: unknown }).node;
    return typeof v === "string" ? v : undefined;
  } catch {
    return undefined;
  }
}

export async function envdLaunch(envdDir: string, nodeBinary: string, logger: Logger): Promise<EnvdLaunch> {
  const built = await snapshotNodeVersion(envdDir);
  if (!built) return BUNDLE;
  const mounted =
    nodeBinary === process.execPath
      ? process.version
      : await exec(nodeBinary, ["--version"], { timeoutMs: 10_000 }).then(
          (r) => r.stdout.trim(),
          (e: unknown) => `unknown (${e instanceof Error ? e.message : String(e)})`,
        );
  if (built === mounted) return SNAPSHOT;
  logger.warn({ envdDir, snapshotNode: built, nodeBinary, node: mounted }, "envd snapshot was built by another Node.js: envd starts from the bundle (slower); rebuild with npm run build:envd");
  return BUNDLE;
}
