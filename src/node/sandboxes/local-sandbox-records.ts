/**
 * What the node keeps of each sandbox across agent restarts: one JSON file per sandbox
 * (its spec, state, address and envd port), root-only because the spec holds env vars and
 * the envd token. The startup reconcile reads them back (manager.ts).
 */
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
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

/** A record up to this size is saved in place: one page, which a write copies whole or not at all. */
const IN_PLACE_MAX = 4096;

export class LocalSandboxRecords {
  private readonly dir: string;
  /** The dir, made once (again after a failure): a save is on the create's path, twice. */
  private made: Promise<void> | undefined;
  /** Per sandbox, its last save or remove: each waits for the one before (they run in the thread pool). */
  private readonly last = new Map<string, Promise<void>>();
  /** Each record file's length as this process last wrote it (a save in place pads to it). */
  private readonly sizes = new Map<string, number>();

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
   * Replaces the record whole: a crash mid-save leaves the old record or the new one, never
   * a torn one the restart would skip and so not adopt. A record that fits in a page (all
   * but those with large env vars) is rewritten in place with one write of at least the old
   * record's length (padded with spaces, which JSON allows): the kernel copies a page whole
   * or not at all, and no file is made or deleted. Every save was a new file renamed over
   * the old before: on ext4 without a journal each new inode is checked against every one
   * deleted in the last half minute, a cost a burst of creates paid per file
   * (docs/capacity.md). A first save, or a larger one, still writes beside and renames.
   * Through the thread pool, not synchronously: in a burst of adoptions a synchronous save
   * held the loop every other create and command goes through ~1.7 ms.
   */
  save(s: LocalSandboxRecord): Promise<void> {
    // What the record holds when its turn comes: a later save's state is never overwritten by an earlier one.
    const id = s.spec.sandboxId;
    return this.inTurn(id, async () => {
      await this.makeDir();
      const r: LocalSandboxRecord = { spec: s.spec, state: s.state, address: s.address, envdPort: s.envdPort, startedAt: s.startedAt, ...(s.timings ? { timings: s.timings } : {}) };
      const json = Buffer.from(JSON.stringify(r));
      const path = this.path(id);
      const old = this.sizes.get(id) ?? (await stat(path).then((st) => st.size, () => 0));
      const size = Math.max(json.length, old);
      if (old > 0 && size <= IN_PLACE_MAX) {
        const padded = Buffer.alloc(size, " ");
        json.copy(padded);
        const written = await writeFile(path, padded, { flag: "r+" }).then(() => true, (e: NodeJS.ErrnoException) => {
          if (e.code === "ENOENT") return false; // removed behind us: made anew below
          throw e;
        });
        if (written) {
          this.sizes.set(id, size);
          return;
        }
      }
      await writeFile(`${path}.new`, json, { mode: 0o600 });
      await rename(`${path}.new`, path);
      this.sizes.set(id, json.length);
    });
  }

  /** Absent = ok; with a replacement a crash left unrenamed. */
  remove(id: string): Promise<void> {
    return this.inTurn(id, async () => {
      this.sizes.delete(id);
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
