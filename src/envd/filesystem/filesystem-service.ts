/**
 * filesystem.Filesystem (e2b-wire.md §3). Paths resolve against the requesting user's
 * home; every operation runs with that user's rights (`envd.privileges.asUser`, privileges.ts),
 * so what the user may not touch is `permission_denied` and what it creates is its own.
 * The operations are synchronous for that reason (one thread's credentials change).
 */
import { cpSync, lstatSync, mkdirSync, opendirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { SpaceError } from "../../core/errors.ts";
import { Filesystem, type WatchDirResponseSchema } from "../../gen/filesystem/filesystem_pb.ts";
import { userFromHeaders, type Envd } from "../context.ts";
import { fsError } from "../connect-errors.ts";
import { resolveUserPath } from "../paths.ts";
import { keepaliveMs, throwIfDeadline } from "../process/process-service.ts";
import type { User } from "../users.ts";
import { entryFromStats, entryInfo, entryInfoSync, type EntryInit } from "./entry.ts";
import { DirWatcher, type WatchEvent } from "./watchers.ts";

type WatchInit = MessageInitShape<typeof WatchDirResponseSchema>;

const MAX_QUEUED_EVENTS = 10_000;

/** `f` with `user`'s rights; fs errors mapped to the taxonomy. */
function asUser<T>(envd: Envd, user: User, f: () => T): T {
  try {
    return envd.privileges.asUser(user, f);
  } catch (e: unknown) {
    throw fsError(e);
  }
}

function requireDir(path: string): void {
  if (!statSync(path).isDirectory()) throw new SpaceError("invalid_argument", `path ${JSON.stringify(path)} is not a directory`);
}

/** A watch needs the right to list the directory. */
function requireListable(path: string): void {
  requireDir(path);
  opendirSync(path).closeSync();
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

async function eventInit(envd: Envd, ev: WatchEvent, includeEntry: boolean) {
  let entry: EntryInit | undefined;
  if (includeEntry) entry = await entryInfo(envd, ev.path).catch(() => undefined);
  return { name: ev.name, type: ev.type, entry };
}

export function filesystemService(envd: Envd): ServiceImpl<typeof Filesystem> {
  const userOf = (ctx: HandlerContext) => userFromHeaders(envd, ctx.requestHeader.get("authorization"));
  return {
    async stat(req, ctx) {
      const user = userOf(ctx);
      const path = resolveUserPath(req.path, user);
      return { entry: asUser(envd, user, () => entryInfoSync(envd, path)) };
    },

    async makeDir(req, ctx) {
      const user = userOf(ctx);
      const path = resolveUserPath(req.path, user);
      const entry = asUser(envd, user, () => {
        if (exists(path)) throw new SpaceError("already_exists", `path ${JSON.stringify(path)} already exists`);
        mkdirSync(path, { recursive: true });
        return entryInfoSync(envd, path);
      });
      return { entry };
    },

    async move(req, ctx) {
      const user = userOf(ctx);
      const src = resolveUserPath(req.source, user);
      const dst = resolveUserPath(req.destination, user);
      const entry = asUser(envd, user, () => {
        lstatSync(src);
        mkdirSync(dirname(dst), { recursive: true });
        try {
          renameSync(src, dst);
        } catch (e: unknown) {
          if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
          cpSync(src, dst, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
          rmSync(src, { recursive: true, force: true });
        }
        return entryInfoSync(envd, dst);
      });
      return { entry };
    },

    async listDir(req, ctx) {
      const user = userOf(ctx);
      const root = resolveUserPath(req.path, user);
      const depth = Math.max(1, req.depth || 1);
      const entries: EntryInit[] = [];
      const walk = (dir: string, level: number): void => {
        let names: string[];
        try {
          names = readdirSync(dir);
        } catch {
          return; // unreadable or raced with a delete
        }
        for (const n of names) {
          const p = join(dir, n);
          let e: EntryInit;
          let isDir = false;
          try {
            const st = lstatSync(p);
            isDir = st.isDirectory();
            e = st.isSymbolicLink() ? entryInfoSync(envd, p) : entryFromStats(envd, p, st);
          } catch {
            continue;
          }
          entries.push(e);
          if (isDir && level < depth) walk(p, level + 1);
        }
      };
      asUser(envd, user, () => {
        requireDir(root);
        // The root itself must be listable (a subdirectory that is not is skipped).
        readdirSync(root);
        walk(root, 1);
      });
      entries.sort((a, b) => (a.path! < b.path! ? -1 : a.path! > b.path! ? 1 : 0));
      return { entries };
    },

    // A missing path is not an error: E2B's envd removes with os.RemoveAll.
    async remove(req, ctx) {
      const user = userOf(ctx);
      const path = resolveUserPath(req.path, user);
      asUser(envd, user, () => rmSync(path, { recursive: true, force: true }));
      return {};
    },

    async *watchDir(req, ctx) {
      const user = userOf(ctx);
      const dir = resolveUserPath(req.path, user);
      asUser(envd, user, () => requireListable(dir));
      const queue: WatchInit[] = [];
      let wake: (() => void) | undefined;
      let failure: unknown;
      const push = (m: WatchInit) => {
        queue.push(m);
        const w = wake;
        wake = undefined;
        w?.();
      };
      let chain = Promise.resolve();
      const w = new DirWatcher(
        dir,
        req.recursive,
        (ev) => {
          // Keep order while entries are looked up asynchronously.
          chain = chain.then(async () => {
            // A reader that stopped reading loses the oldest events, not envd's memory.
            if (queue.length >= MAX_QUEUED_EVENTS) queue.shift();
            push({ event: { case: "filesystem", value: await eventInit(envd, ev, req.includeEntry) } });
          });
        },
        (e) => {
          failure = e;
          wake?.();
        },
      );
      const ka = keepaliveMs(ctx);
      try {
        yield { event: { case: "start", value: {} } };
        for (;;) {
          const m = queue.shift();
          if (m) {
            yield m;
            continue;
          }
          if (failure) throw new SpaceError("internal", `watching ${JSON.stringify(dir)} failed: ${String(failure)}`);
          if (ctx.signal.aborted) return throwIfDeadline(ctx);
          const r = await new Promise<string>((resolve) => {
            const t = setTimeout(() => done("timeout"), ka);
            const onAbort = () => done("abort");
            const done = (x: string) => {
              clearTimeout(t);
              ctx.signal.removeEventListener("abort", onAbort);
              wake = undefined;
              resolve(x);
            };
            wake = () => done("item");
            ctx.signal.addEventListener("abort", onAbort, { once: true });
          });
          if (r === "abort") return throwIfDeadline(ctx);
          if (r === "timeout") yield { event: { case: "keepalive", value: {} } };
        }
      } finally {
        w.close();
      }
    },

    async createWatcher(req, ctx) {
      const user = userOf(ctx);
      const dir = resolveUserPath(req.path, user);
      asUser(envd, user, () => requireListable(dir));
      return { watcherId: envd.watchers.create(dir, req.recursive, req.includeEntry) };
    },

    async getWatcherEvents(req) {
      const { events, includeEntry } = envd.watchers.drain(req.watcherId);
      return { events: await Promise.all(events.map((ev) => eventInit(envd, ev, includeEntry))) };
    },

    async removeWatcher(req) {
      envd.watchers.remove(req.watcherId);
      return {};
    },
  };
}
