/**
 * File metadata set through `POST /files` `X-Metadata-*` headers, returned in
 * EntryInfo.metadata. Node has no xattr API, so metadata lives in a sidecar directory
 * keyed by device and inode (it follows renames and in-place overwrites); the file's
 * birth time guards against a reused inode.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync, type Stats } from "node:fs";
import { join } from "node:path";

interface Record_ {
  birthtimeMs: number;
  metadata: Record<string, string>;
}

export class MetadataStore {
  private index: Map<string, Record_> | undefined;
  constructor(private readonly dir: string) {}

  private load(): Map<string, Record_> {
    if (this.index) return this.index;
    this.index = new Map();
    try {
      for (const f of readdirSync(this.dir)) {
        if (!f.endsWith(".json")) continue;
        try {
          this.index.set(f.slice(0, -5), JSON.parse(readFileSync(join(this.dir, f), "utf8")) as Record_);
        } catch {
          /* torn write: ignore */
        }
      }
    } catch {
      /* no dir yet */
    }
    return this.index;
  }

  get(st: Stats): Record<string, string> | undefined {
    const r = this.load().get(`${st.dev}-${st.ino}`);
    if (!r || r.birthtimeMs !== st.birthtimeMs) return undefined;
    return r.metadata;
  }

  set(st: Stats, metadata: Record<string, string>): void {
    const key = `${st.dev}-${st.ino}`;
    const rec: Record_ = { birthtimeMs: st.birthtimeMs, metadata };
    this.load().set(key, rec);
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const tmp = join(this.dir, `.${key}.tmp`);
    writeFileSync(tmp, JSON.stringify(rec));
    renameSync(tmp, join(this.dir, `${key}.json`));
  }
}
