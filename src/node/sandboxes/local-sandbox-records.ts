/**
 * What the node keeps of each sandbox across agent restarts: one JSON file per sandbox
 * (its spec, state, address and envd port), root-only because the spec holds env vars and
 * the envd token. The startup reconcile reads them back (manager.ts).
 */
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
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

  async save(s: LocalSandboxRecord): Promise<void> {
    await this.makeDir();
    const r: LocalSandboxRecord = { spec: s.spec, state: s.state, address: s.address, envdPort: s.envdPort, startedAt: s.startedAt, ...(s.timings ? { timings: s.timings } : {}) };
    await writeFile(this.path(s.spec.sandboxId), JSON.stringify(r), { mode: 0o600 });
  }

  /** Absent = ok. */
  async remove(id: string): Promise<void> {
    await rm(this.path(id), { force: true });
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
