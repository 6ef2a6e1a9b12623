/**
 * Capture after ready: a template with a start command is booted once, its start command
 * run until the ready command passes, and the sandbox checkpointed (memory + disk, published
 * to the blob store by node/snapshots). Sandboxes of the template are then restored from
 * that checkpoint — envd re-initialised with their own env vars and token — instead of
 * booting cold and running the start command again. A restore that fails falls back to a
 * cold boot.
 */
import { randomId, newExecutionId, newSandboxId } from "../../core/ids.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { SandboxSpec, SandboxStatus } from "../../contract/node-api.ts";
import type { Disks } from "../disk/disks.ts";
import type { SandboxManager } from "../sandboxes/manager.ts";
import type { NodeSnapshots, RestoreOptions } from "../snapshots/node-snapshots.ts";
import type { SnapshotDescriptor } from "../../contract/snapshot-descriptor.ts";

export interface CaptureDeps {
  manager: SandboxManager;
  snapshots: NodeSnapshots;
  disks: Disks;
  logger: Logger;
}

/** The checkpoint of template `name` booted and ready (its sandbox ends with the capture). */
export async function captureReady(d: CaptureDeps, name: string, signal: AbortSignal): Promise<SnapshotDescriptor> {
  const info = await d.disks.templateInfo(name);
  if (!info) throw new SpaceError("not_found", `template ${name} is not in this node's cache`);
  const id = newSandboxId();
  const spec: SandboxSpec = {
    sandboxId: id,
    executionId: newExecutionId(),
    template: name,
    vcpu: 1,
    memoryMib: 512,
    diskMib: Math.max(1024, info.rootfsSizeMib + 512),
    envVars: {},
    allowInternetAccess: false,
  };
  const t0 = Date.now();
  await d.manager.create(spec, signal);
  try {
    const desc = await d.snapshots.suspend(id, `sn_${randomId(16)}`, { upload: true }, signal);
    d.logger.info({ template: name, snapshotId: desc.snapshotId, ms: Date.now() - t0 }, "template captured after ready");
    return desc;
  } catch (e) {
    await d.manager.kill(id, AbortSignal.timeout(60_000)).catch(() => undefined);
    throw e;
  }
}

/**
 * Restores `spec` from its template's capture (after ready, or after boot: boot-capture.ts);
 * undefined = it failed (logged, `onFailure` run): the caller boots cold.
 */
export async function restoreCaptured(
  d: CaptureDeps,
  spec: SandboxSpec,
  capture: SnapshotDescriptor,
  signal: AbortSignal,
  o: RestoreOptions & { onFailure?: () => Promise<void> } = {},
): Promise<SandboxStatus | undefined> {
  try {
    // The restored processes keep the capture's environment; envd's /init brings the sandbox's own.
    return await d.snapshots.restore({ ...spec, envVars: { E2B_SANDBOX_ID: spec.sandboxId, ...spec.envVars } }, capture, signal, o);
  } catch (e) {
    if (signal.aborted) throw e;
    d.logger.warn({ sandboxId: spec.sandboxId, template: spec.template, snapshotId: capture.snapshotId, err: e }, "restore from the template's capture failed; booting cold");
    await o.onFailure?.();
    return undefined;
  }
}
