/**
 * What the node keeps of each sandbox across agent restarts: one JSON file per sandbox
 * (its spec, state, address and envd port), root-only because the spec holds env vars and
 * the envd token. The startup reconcile reads them back (manager.ts).
 */
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { SandboxSpec } from "../../contract/node-api.ts";
import type { NodeState } from "./states.ts";
import { WholeFiles } from "../../core/whole-files.ts";

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
  /** Per sandbox, its last save or remove: each waits for the one before (they run in the thread pool). */
  private readonly last = new Map<string, Promise<void>>();
  private readonly files = new WholeFiles();

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
   * Replaces the record whole (core/whole-files.ts: in place when it fits in a page, else
   * written beside and renamed over): a crash mid-save never leaves a torn record the
   * restart would skip and so not adopt. Through the thread pool, not synchronously: in a
   * burst of adoptions a synchronous save held the loop every other create and command goes
   * through ~1.7 ms.
   */
  save(s: LocalSandboxRecord): Promise<void> {
    // What the record holds when its turn comes: a later save's state is never overwritten by an earlier one.
    return this.inTurn(s.spec.sandboxId, async () => {
      await this.makeDir();
      const r: LocalSandboxRecord = { spec: s.spec, state: s.state, address: s.address, envdPort: s.envdPort, startedAt: s.startedAt, ...(s.timings ? { timings: s.timings } : {}) };
      await this.files.write(this.path(s.spec.sandboxId), JSON.stringify(r));
    });
  }

  /** Absent = ok; with a replacement a crash left unrenamed. */
  remove(id: string): Promise<void> {
    return this.inTurn(id, async () => {
      this.files.forget(this.path(id));
      await Promise.all([rm(this.path(id), { force: true }), rm(`${this.path(id)}.new`, { force: true })]);
    });
  }

  private inTurn(id: string, f: () => Promise<void>): Promise<void> {
    const run = (this.last.get(id) ?? Promise.resolve()).then(f, f);
    const settled = run.catch(() => undefined);
    this.last.set(id, settled);
    void settled.then(() => {
      if (this.last.get(id) === settled) this.last.delete(id);
    });
    return run;
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
