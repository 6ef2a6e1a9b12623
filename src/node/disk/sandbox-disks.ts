/**
 * The seam the sandbox manager uses for sandbox disks. Implementations: btrfs snapshots of
 * a template limited by qgroups (Disks, the OCI runtimes) and plain directories
 * (DirectoryDisks, the process runtime); the node agent picks one where it builds the manager.
 */
import type { TemplateInfo } from "./disks.ts";

export interface SandboxDisks {
  /** What a disk is, part of the node's execution environment. */
  readonly rootfsFormat: "btrfs-subvolume" | "directory";
  /** Refuses at once (no disk work) a disk this store cannot give: an unknown template, too small, a full node. */
  admit(template: string, diskMib: number): Promise<unknown>;
  /** The template's metadata (its boot settings, node/sandboxes/template-boot.ts); undefined when it has none. */
  templateInfo(name: string): Promise<TemplateInfo | undefined>;
  /**
   * The sandbox's disk made from its template (exists = ok); its size limit lands in
   * `limited`, which the caller awaits before the sandbox is ready and releases the disk on failure.
   */
  snapshotSandboxDisk(id: string, template: string, diskMib: number, signal: AbortSignal): Promise<{ root: string; limited: Promise<void> }>;
  /** The root filesystem of the sandbox's disk, as the runtime sees it. */
  sandboxRoot(id: string): string;
  /** Absent = ok. `keepFor` (a suspend): kept a moment for a restore of that snapshot here, where the store can. */
  releaseSandboxDisk(id: string, signal: AbortSignal, o?: { keepFor?: string }): Promise<void>;
  /** What the disk holds; undefined when it is not measured. */
  usage(id: string, signal: AbortSignal): Promise<{ referencedBytes: number } | undefined>;
  /** Ids of the sandbox disks present (the startup reconcile). */
  listSandboxDisks(): Promise<string[]>;
}
