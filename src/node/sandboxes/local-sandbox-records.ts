/**
 * What the node keeps of each sandbox across agent restarts: one JSON file per sandbox
 * (its spec, state, address and envd port), root-only because the spec holds env vars and
 * the envd token. The startup reconcile reads them back (manager.ts).
 */
import { renameSync, writeFileSync } from "node:fs";
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { SandboxSpec } from "../../contract/node-api.ts";
import type { NodeState } from "./states.ts";

/** One sandbox as this node knows it (the control plane's record of the row is src/store/sandboxes.ts `SandboxRecord`). */
export interface LocalSandboxRecord {
  spec: SandboxSpec;
  state: NodeState;
  address: string;
  envdPort: number;
  startedAt: string;
  timings?: Record<string, number>;
}

export class LocalSandboxRecords {
  private readonly dir: string;
  /** The dir, made once (again after a failure): a save is on the create's path, twice. */
  private made: Promise<void> | undefined;

  constructor(dir: string) {
    this.dir = dir;
  }

  private makeDir(): Promise<void> {
    this.made ??= mkdir(this.dir, { recursive: true }).then(
      () => undefined,
      (e: unknown) => {
        this.made = undefined;
        throw e;
      },
    );
    return this.made;
  }

  private path(id: string): string {
    return join(this.dir, `${id}.json`);
  }

  /**
   * Replaces the record whole (a new file renamed over the old: a crash mid-write leaves the
   * old record, never a truncated one the restart would skip and so not adopt). Synchronous,
   * like the cgroup writes beside it: a small file written and renamed is ~0.2 ms of the
   * loop, against three round trips through the thread pool (open, write, close).
   */
  async save(s: LocalSandboxRecord): Promise<void> {
    await this.makeDir();
    const r: LocalSandboxRecord = { spec: s.spec, state: s.state, address: s.address, envdPort: s.envdPort, startedAt: s.startedAt, ...(s.timings ? { timings: s.timings } : {}) };
    const path = this.path(s.spec.sandboxId);
    writeFileSync(`${path}.new`, JSON.stringify(r), { mode: 0o600 });
    renameSync(`${path}.new`, path);
  }

  /** Absent = ok; with a replacement a crash left unrenamed. */
  async remove(id: string): Promise<void> {
    await Promise.all([rm(this.path(id), { force: true }), rm(`${this.path(id)}.new`, { force: true })]);
  }

  async list(): Promise<LocalSandboxRecord[]> {
    const out: LocalSandboxRecord[] = [];
    for (const f of await readdir(this.dir).catch(() => [] as string[])) {
      if (!f.endsWith(".json")) continue;
      const r = await readFile(join(this.dir, f), "utf8").then((t) => JSON.parse(t) as LocalSandboxRecord).catch(() => undefined);
      if (r) out.push(r);
    }
    return out;
  }
}
