/**
 * How a sandbox's init (envd) is started: from the bundle's V8 startup snapshot
 * (dist/envd/envd.blob, scripts/build-envd.mjs) when it was built by the very Node.js
 * mounted into the sandbox with envd's node flags, else from the ESM bundle. A snapshot
 * from another Node.js build or other V8 flags would make node refuse to start, so the
 * build records both beside it.
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
 * Node flags of every envd (scripts/build-envd.mjs builds the snapshot with the same ones).
 * V8 protects wasm code with a memory protection key (PKU) it allocates at start, but CRIU
 * does not restore the kernel's record of allocated keys (a restored process's pkey_alloc
 * hands out the same key again). In an envd restored before its first wasm compile
 * (undici's llhttp, loaded with the global Headers at the first Connect RPC, i.e. process
 * or filesystem call), pkey_mprotect fails with EINVAL and V8 aborts ("Commit wasm code
 * space Allocation failed"), taking the sandbox down; any later wasm code commit would,
 * too. Without the key V8 treats wasm code memory as on a CPU without PKU; envd runs no
 * untrusted wasm.
 */
export const ENVD_NODE_FLAGS: readonly string[] = ["--no-wasm-memory-protection-keys"];

const SNAPSHOT: EnvdLaunch = { kind: "snapshot", argv: (port) => [NODE_MOUNT, ...ENVD_NODE_FLAGS, "--snapshot-blob", `${ENVD_MOUNT}/envd.blob`, "--", "--port", String(port)] };
export const BUNDLE: EnvdLaunch = { kind: "bundle", argv: (port) => [NODE_MOUNT, ...ENVD_NODE_FLAGS, `${ENVD_MOUNT}/envd.mjs`, "--port", String(port)] };

/** What a snapshot was built by (`envd.blob.json`): node version and flags; undefined without one. */
async function snapshotBuild(envdDir: string): Promise<{ node: string; nodeFlags: string[] } | undefined> {
  const meta = await readFile(join(envdDir, "envd.blob.json"), "utf8").catch(() => undefined);
  if (meta === undefined) return undefined;
  const m = JSON.parse(meta) as { node?: unknown; nodeFlags?: unknown };
  if (typeof m.node !== "string") return undefined;
  // A blob from before the flags were recorded was built without any.
  const nodeFlags = Array.isArray(m.nodeFlags) ? m.nodeFlags.filter((f): f is string => typeof f === "string") : [];
  return { node: m.node, nodeFlags };
}

export async function envdLaunch(envdDir: string, nodeBinary: string, logger: Logger): Promise<EnvdLaunch> {
  const build = await snapshotBuild(envdDir);
  if (!build) return BUNDLE;
  if (build.nodeFlags.join(" ") !== ENVD_NODE_FLAGS.join(" ")) {
    logger.warn({ envdDir, snapshotFlags: build.nodeFlags, envdFlags: ENVD_NODE_FLAGS }, "envd snapshot was built with other node flags: envd starts from the bundle (slower); rebuild with npm run build:envd");
    return BUNDLE;
  }
  const built = build.node;
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
