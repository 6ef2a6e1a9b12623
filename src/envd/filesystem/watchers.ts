/**
 * Directory watching on fs.watch (inotify). fs.watch only says "rename" or "change", so
 * each event is classified against what the watcher last saw at that path (inode, mode,
 * mtime, size): new path → CREATE, gone → REMOVE (or RENAME when the same inode shows
 * up under another name within RENAME_PAIR_MS), mode-only change → CHMOD, else WRITE.
 */
import { watch, existsSync, lstatSync, readdirSync, statSync, type FSWatcher, type Stats } from "node:fs";
import { join } from "node:path";
import { randomId } from "../../core/ids.ts";
import { SpaceError } from "../../core/errors.ts";
import { EventType } from "../../gen/filesystem/filesystem_pb.ts";

const RENAME_PAIR_MS = 30;
const INITIAL_SCAN_LIMIT = 20_000;
/** GetWatcherEvents buffer bound; the oldest events are dropped beyond it. */
const MAX_BUFFERED_EVENTS = 10_000;

export interface WatchEvent {
  /** Relative to the watched directory. */
  name: string;
  type: EventType;
  /** Absolute path (for includeEntry). */
  path: string;
}

interface Seen {
  ino: number;
  mode: number;
  mtimeMs: number;
  size: number;
}

const seen = (st: Stats): Seen => ({ ino: st.ino, mode: st.mode, mtimeMs: st.mtimeMs, size: st.size });

/** Checks the directory: `not_found` if missing, `invalid_argument` if not a directory. */
export function checkWatchDir(dir: string): void {
  let st;
  try {
    st = statSync(dir);
  } catch {
    throw new SpaceError("not_found", `directory ${JSON.stringify(dir)} does not exist`);
  }
  if (!st.isDirectory()) throw new SpaceError("invalid_argument", `path ${JSON.stringify(dir)} is not a directory`);
}

export class DirWatcher {
  private readonly fsw: FSWatcher;
  private readonly known = new Map<string, Seen>();
  /** inode → last path seen with it (rename detection when the new name comes first). */
  private readonly byIno = new Map<number, string>();
  /** Old names already reported as RENAME: their late "gone" event is not a REMOVE. */
  private readonly renamedAway = new Set<string>();
  private readonly pendingRemoves = new Map<string, { ino: number; timer: NodeJS.Timeout }>();
  private closed = false;

  constructor(
    readonly root: string,
    readonly recursive: boolean,
    private readonly emit: (ev: WatchEvent) => void,
    onError: (e: Error) => void,
  ) {
    checkWatchDir(root);
    this.scan("", 0);
    this.fsw = watch(root, { recursive, persistent: false }, (type, filename) => {
      if (filename === null || this.closed) return;
      this.onRaw(type, filename.toString());
    });
    this.fsw.on("error", (e) => {
      if (!this.closed) onError(e);
    });
  }

  private scan(rel: string, depth: number): void {
    let names: string[];
    try {
      names = readdirSync(join(this.root, rel));
    } catch {
      return;
    }
    for (const n of names) {
      if (this.known.size >= INITIAL_SCAN_LIMIT) return;
      const r = rel ? join(rel, n) : n;
      try {
        const st = lstatSync(join(this.root, r));
        this.remember(r, seen(st));
        if (this.recursive && st.isDirectory() && depth < 64) this.scan(r, depth + 1);
      } catch {
        /* raced with a delete */
      }
    }
  }

  private remember(rel: string, s: Seen): void {
    this.known.set(rel, s);
    this.byIno.set(s.ino, rel);
  }

  private forget(rel: string): void {
    const s = this.known.get(rel);
    this.known.delete(rel);
    if (s && this.byIno.get(s.ino) === rel) this.byIno.delete(s.ino);
  }

  private onRaw(type: string, rel: string): void {
    const abs = join(this.root, rel);
    let st: Stats | undefined;
    try {
      st = lstatSync(abs);
    } catch {
      st = undefined;
    }
    const prev = this.known.get(rel);
    if (!st) {
      if (this.renamedAway.delete(rel)) return;
      if (!prev && type !== "rename") return;
      this.forget(rel);
      if (this.pendingRemoves.has(rel)) return;
      const timer = setTimeout(() => {
        this.pendingRemoves.delete(rel);
        this.out(rel, EventType.REMOVE);
      }, RENAME_PAIR_MS);
      this.pendingRemoves.set(rel, { ino: prev?.ino ?? -1, timer });
      return;
    }
    const now = seen(st);
    if (!prev || prev.ino !== now.ino) {
      // The same inode under an old name that is gone now: a rename whose new name was
      // reported first (node's recursive watcher does that).
      const oldRel = this.byIno.get(now.ino);
      this.remember(rel, now);
      if (oldRel !== undefined && oldRel !== rel && !existsSync(join(this.root, oldRel))) {
        this.known.delete(oldRel);
        const p = this.pendingRemoves.get(oldRel);
        if (p) {
          clearTimeout(p.timer);
          this.pendingRemoves.delete(oldRel);
        } else {
          this.renamedAway.add(oldRel);
          setTimeout(() => this.renamedAway.delete(oldRel), 1000).unref();
        }
        this.out(oldRel, EventType.RENAME);
        this.out(rel, EventType.CREATE);
        return;
      }
      // A removal of the same inode a moment ago was the first half of a rename.
      for (const [oldRel, p] of this.pendingRemoves) {
        if (p.ino === now.ino) {
          clearTimeout(p.timer);
          this.pendingRemoves.delete(oldRel);
          this.out(oldRel, EventType.RENAME);
          break;
        }
      }
      this.out(rel, EventType.CREATE);
      return;
    }
    this.remember(rel, now);
    if (prev.mode !== now.mode && prev.mtimeMs === now.mtimeMs && prev.size === now.size) {
      this.out(rel, EventType.CHMOD);
      return;
    }
    this.out(rel, EventType.WRITE);
  }

  private out(rel: string, type: EventType): void {
    if (!this.closed) this.emit({ name: rel, type, path: join(this.root, rel) });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.pendingRemoves.values()) clearTimeout(p.timer);
    this.pendingRemoves.clear();
    this.fsw.close();
  }
}

/** Polled watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher). */
export class Watchers {
  private readonly byId = new Map<string, { w: DirWatcher; events: WatchEvent[]; includeEntry: boolean }>();

  create(dir: string, recursive: boolean, includeEntry: boolean): string {
    const id = randomId(16);
    const events: WatchEvent[] = [];
    const w = new DirWatcher(
      dir,
      recursive,
      (ev) => {
        events.push(ev);
        if (events.length > MAX_BUFFERED_EVENTS) events.shift();
      },
      () => {},
    );
    this.byId.set(id, { w, events, includeEntry });
    return id;
  }

  drain(id: string): { events: WatchEvent[]; includeEntry: boolean } {
    const rec = this.byId.get(id);
    if (!rec) throw new SpaceError("not_found", `watcher ${JSON.stringify(id)} not found`);
    return { events: rec.events.splice(0), includeEntry: rec.includeEntry };
  }

  remove(id: string): void {
    const rec = this.byId.get(id);
    if (!rec) throw new SpaceError("not_found", `watcher ${JSON.stringify(id)} not found`);
    rec.w.close();
    this.byId.delete(id);
  }

  closeAll(): void {
    for (const r of this.byId.values()) r.w.close();
    this.byId.clear();
  }
}
