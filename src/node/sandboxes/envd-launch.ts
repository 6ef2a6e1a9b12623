/**
 * How a sandbox's init (envd) is started: from the bundle's V8 startup snapshot
 * (dist/envd/envd.blob, scripts/build-envd.mjs) when it was built by the very Node.js
 * mounted into the sandbox, else from the ESM bundle. A snapshot from another Node.js
 * build, or under other V8 flags, would make node refuse to start, so the build records
 * its version and flags beside it.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../../core/log.ts";
import { exec } from "../../core/exec.ts";

/** Where the node binary and the envd bundle are mounted inside a sandbox. */
export const NODE_MOUNT = "/opt/space/bin/node";
export const ENVD_MOUNT = "/opt/space/envd";

export type EnvdLaunch = { kind: "snapshot" | "bundle"; argv: (port: number) => string[] };

/** What the build recorded beside the snapshot (`envd.blob.json`): the Node.js that built it and the V8 flags baked in. */
export interface SnapshotMeta {
  node: string;
  /** A snapshot loads only under the V8 flags it was built with: envd runs with them. */
  v8Flags: string[];
}

const FLAG = /^--[a-z0-9-]+(=[\w.]+)?$/;

/** The snapshot's record, or undefined without a snapshot (or an unreadable record). */
export async function snapshotMeta(envdDir: string): Promise<SnapshotMeta | undefined> {
  const text = await readFile(join(envdDir, "envd.blob.json"), "utf8").catch(() => undefined);
  if (text === undefined) return undefined;
  let m: { node?: unknown; v8Flags?: unknown };
  try {
    m = JSON.parse(text) as typeof m;
  } catch {
    return undefined;
  }
  if (typeof m.node !== "string") return undefined;
  const flags = Array.isArray(m.v8Flags) ? m.v8Flags : [];
  if (!flags.every((f): f is string => typeof f === "string" && FLAG.test(f))) return undefined;
  return { node: m.node, v8Flags: flags };
}

const snapshot = (v8Flags: readonly string[]): EnvdLaunch => ({
  kind: "snapshot",
  argv: (port) => [NODE_MOUNT, ...v8Flags, "--snapshot-blob", `${ENVD_MOUNT}/envd.blob`, "--", "--port", String(port)],
});
export const BUNDLE: EnvdLaunch = { kind: "bundle", argv: (port) => [NODE_MOUNT, `${ENVD_MOUNT}/envd.mjs`, "--port", String(port)] };

export async function envdLaunch(envdDir: string, nodeBinary: string, logger: Logger): Promise<EnvdLaunch> {
  const built = await snapshotMeta(envdDir);
  if (!built) return BUNDLE;
  const mounted =
    nodeBinary === process.execPath
      ? process.version
      : await exec(nodeBinary, ["--version"], { timeoutMs: 10_000 }).then(
          (r) => r.stdout.trim(),
          (e: unknown) => `unknown (${e instanceof Error ? e.message : String(e)})`,
        );
  if (built.node === mounted) return snapshot(built.v8Flags);
  logger.warn({ envdDir, snapshotNode: built.node, nodeBinary, node: mounted }, "envd snapshot was built by another Node.js: envd starts from the bundle (slower); rebuild with npm run build:envd");
  return BUNDLE;
}
