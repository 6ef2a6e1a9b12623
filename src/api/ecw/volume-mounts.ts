/**
 * E2B's `SandboxVolumeMount` (`{name, path}`) both ways: a create's `volumeMounts` into
 * mounts, and a sandbox's stored mounts into the `volumeMounts` of its info and list
 * answers. E2B's wire has no read-only flag: a name ending in `:ro` mounts read-only
 * (SPACE's extension, docs/volumes.md), and an answer names a read-only mount the same way,
 * so an answer's `volumeMounts` given to a create again mounts the same.
 */
import type { VolumeMount, VolumeMountRequest } from "../../sandboxes/volume-service.ts";

export const READ_ONLY_SUFFIX = ":ro";

/** `{name, path}` → a mount; `name:ro` is read-only. */
export function fromEcwMount(m: { name: string; path: string }): VolumeMountRequest {
  const readOnly = m.name.endsWith(READ_ONLY_SUFFIX);
  return { name: readOnly ? m.name.slice(0, -READ_ONLY_SUFFIX.length) : m.name, path: m.path, readOnly };
}

/** A stored mount → `{name, path}` (the name with `:ro` when read-only). */
export function toEcwMount(m: Pick<VolumeMount, "name" | "path" | "readOnly">): { name: string; path: string } {
  return { name: m.readOnly ? `${m.name}${READ_ONLY_SUFFIX}` : m.name, path: m.path };
}
