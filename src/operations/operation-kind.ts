/**
 * The public operation kinds (behaviours.md A) as one table: for each kind the request
 * its row holds, what its target names, how its result is presented, and how the
 * dispatcher runs it. Admission (src/api/native) writes rows of these kinds, the
 * dispatcher (src/controller/dispatcher.ts) claims them and runs the kind's handler
 * (operation-handlers.ts, exhaustive over this list). A new kind is a row here, a
 * handler, and a route.
 */
import type { z } from "zod";
import { SpaceError } from "../core/errors.ts";
import {
  CommandCancelRequest,
  CommandRunRequest,
  SandboxCreateRequest,
  SandboxForkRequest,
  SandboxRequest,
  SandboxSuspendRequest,
  TemplateBuildRequest,
  VolumeCreateRequest,
  VolumeRequest,
  type TargetKind,
} from "./requests.ts";
import { toCommandOutcome, toNativeBuild, toNativeVolume, toSandbox, toVolumeDeleted } from "./results.ts";

export const operationKinds = [
  "sandbox.create",
  "sandbox.delete",
  "sandbox.pause",
  "sandbox.resume",
  "sandbox.suspend",
  "sandbox.restore",
  "sandbox.stop",
  "sandbox.start",
  "sandbox.fork",
  "command.run",
  "command.cancel",
  "template.build",
  "volume.create",
  "volume.delete",
] as const;
export type OperationKind = (typeof operationKinds)[number];

export const isOperationKind = (kind: string): kind is OperationKind => (operationKinds as readonly string[]).includes(kind);

interface KindSpec {
  /** The request the row holds; the handler reads it with this schema. */
  request: z.ZodType;
  /** What the row's target names. */
  target: TargetKind;
  /** Presents what the handler ends with as the operation's result. */
  present: (x: never) => unknown;
  /**
   * Runs one after another with the other serialised operations on the same target in one
   * replica, so pause/resume/delete do not interleave on the node.
   */
  serialised: boolean;
  /** A dependency that is `unavailable` is waited out with backoff (commands reattach by themselves instead). */
  retriesUnavailable: boolean;
}

const sandboxKind = { request: SandboxRequest, target: "sandbox", present: toSandbox, serialised: true, retriesUnavailable: true } as const;

export const operationKindTable = {
  "sandbox.create": { ...sandboxKind, request: SandboxCreateRequest },
  "sandbox.delete": sandboxKind,
  /** Resident pause: the sandbox stays in memory on its node, frozen. */
  "sandbox.pause": sandboxKind,
  "sandbox.resume": sandboxKind,
  /** Memory checkpoint + disk snapshot, node freed (ECW pause); `memory: false`: the disk only. */
  "sandbox.suspend": { ...sandboxKind, request: SandboxSuspendRequest },
  "sandbox.restore": sandboxKind,
  /** Processes end, the rootfs is kept, the network slot is freed. */
  "sandbox.stop": sandboxKind,
  "sandbox.start": sandboxKind,
  /** The result is the new sandbox. */
  "sandbox.fork": { ...sandboxKind, request: SandboxForkRequest },
  "command.run": { request: CommandRunRequest, target: "command", present: toCommandOutcome, serialised: false, retriesUnavailable: false },
  /** Ends with the command's outcome, or `{ command_id, signal }` when it signalled a running one. */
  "command.cancel": { request: CommandCancelRequest, target: "command", present: toCommandOutcome, serialised: false, retriesUnavailable: false },
  "template.build": { request: TemplateBuildRequest, target: "build", present: toNativeBuild, serialised: false, retriesUnavailable: true },
  /** The result is the volume with its content token. */
  "volume.create": { request: VolumeCreateRequest, target: "volume", present: toNativeVolume, serialised: true, retriesUnavailable: true },
  /** Refused (conflict) while a sandbox holds it; then its data is dropped on its node. */
  "volume.delete": { request: VolumeRequest, target: "volume", present: toVolumeDeleted, serialised: true, retriesUnavailable: true },
} as const satisfies Record<OperationKind, KindSpec>;

export type OperationRequest<K extends OperationKind> = z.infer<(typeof operationKindTable)[K]["request"]>;

/** The row's request, read with its kind's schema: an unreadable row fails clearly (`internal`). */
export function readRequest<K extends OperationKind>(kind: K, request: unknown): OperationRequest<K> {
  const r = (operationKindTable[kind].request as z.ZodType).safeParse(request);
  if (!r.success) throw new SpaceError("internal", `operation ${kind} has an unreadable request: ${r.error.message.slice(0, 200)}`);
  return r.data as OperationRequest<K>;
}
