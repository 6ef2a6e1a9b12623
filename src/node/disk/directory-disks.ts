/**
 * Sandbox disks of the process runtime: a plain directory per sandbox (the working
 * directory of its processes, which see the host's filesystem), with no size limit and no
 * template behind it; `base` is the only template, the host itself.
 */
import { mkdir, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { SpaceError } from "../../core/errors.ts";
import type { TemplateInfo } from "./disks.ts";
import type { SandboxDisks } from "./sandbox-disks.ts";

export class DirectoryDisks implements SandboxDisks {
  readonly rootfsFormat = "directory" as const;
  private readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  async admit(template: string): Promise<void> {
    if (template !== "base") throw new SpaceError("not_found", `template ${template} is not available to the process runtime`);
  }

  async templateInfo(): Promise<TemplateInfo | undefined> {
    return undefined;
  }

  async snapshotSandboxDisk(id: string): Promise<{ root: string; limited: Promise<void> }> {
    const root = this.sandboxRoot(id);
    await mkdir(root, { recursive: true });
    return { root, limited: Promise.resolve() };
  }

  sandboxRoot(id: string): string {
    return join(this.dir, id);
  }

  async releaseSandboxDisk(id: string): Promise<void> {
    await rm(this.sandboxRoot(id), { recursive: true, force: true });
  }

  async usage(): Promise<undefined> {
    return undefined;
  }

  async listSandboxDisks(): Promise<string[]> {
    return readdir(this.dir).catch(() => [] as string[]);
  }
}
