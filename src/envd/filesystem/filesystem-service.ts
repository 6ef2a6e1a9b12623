/**
 * filesystem.Filesystem (e2b-wire.md §3). Paths resolve against the requesting user's
 * home; envd runs as root and chowns what it creates to that user.
 */
import { lstat, readdir, rename, rm, stat, cp } from "node:fs/promises";
import { join } from "node:path";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { SpaceError } from "../../core/errors.ts";
import { Filesystem, type WatchDirResponseSchema } from "../../gen/filesystem/filesystem_pb.ts";
import { userFromHeaders, type Envd } from "../context.ts";
import { fsError } from "../connect-errors.ts";
import { resolveUserPath } from "../paths.ts";
import { keepaliveMs } from "../process/process-service.ts";
import { entryFromStats, entryInfo, type EntryInit } from "./entry.ts";
import { ensureParentOwned, mkdirpOwned } from "./ownership.ts";
import { DirWatcher, type WatchEvent } from "./watchers.ts";

type WatchInit = MessageInitShape<typeof WatchDirResponseSchema>;

const MAX_QUEUED_EVENTS = 10_000;

async function guard<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e: unknown) {
    throw fsError(e);
  }
}

async function requireDir(path: string): Promise<void> {
  let st;
  try {
    st = await stat(path);
  } catch (e: unknown) {
    throw fsError(e);
  }
  if (!st.isDirectory()) throw new SpaceError("invalid_argument", `path ${JSON.stringify(path)} is not a directory`);
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
      const path = resolveUserPath(req.path, userOf(ctx));
      return { entry: await guard(() => entryInfo(envd, path)) };
    },

    async makeDir(req, ctx) {
      const user = userOf(ctx);
      const path = resolveUserPath(req.path, user);
      const exists = await lstat(path).then(
        () => true,
        () => false,
      );
      if (exists) throw new SpaceError("already_exists", `path ${JSON.stringify(path)} already exists`);
      await guard(() => mkdirpOwned(path, user));
      return { entry: await guard(() => entryInfo(envd, path)) };
    },

    async move(req, ctx) {
      const user = userOf(ctx);
      const src = resolveUserPath(req.source, user);
      const dst = resolveUserPath(req.destination, user);
      await guard(async () => {
        await lstat(src);
        await ensureParentOwned(dst, user);
        try {
          await rename(src, dst);
        } catch (e: unknown) {
          if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
          await cp(src, dst, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
          await rm(src, { recursive: true, force: true });
        }
      });
      return { entry: await guard(() => entryInfo(envd, dst)) };
    },

    async listDir(req, ctx) {
      const root = resolveUserPath(req.path, userOf(ctx));
      await requireDir(root);
      const depth = Math.max(1, req.depth || 1);
      const entries: EntryInit[] = [];
      const walk = async (dir: string, level: number): Promise<void> => {
        let names: string[];
        try {
          names = await readdir(dir);
        } catch {
          return; // unreadable or raced with a delete
        }
        for (const n of names) {
          const p = join(dir, n);
          let e: EntryInit;
          let isDir = false;
          try {
            const st = await lstat(p);
            isDir = st.isDirectory();
            e = st.isSymbolicLink() ? await entryInfo(envd, p) : entryFromStats(envd, p, st);
          } catch {
            continue;
          }
          entries.push(e);
          if (isDir && level < depth) await walk(p, level + 1);
        }
      };
      await walk(root, 1);
      entries.sort((a, b) => (a.path! < b.path! ? -1 : a.path! > b.path! ? 1 : 0));
      return { entries };
    },

    async remove(req, ctx) {
      const path = resolveUserPath(req.path, userOf(ctx));
      await guard(async () => {
        await lstat(path);
        await rm(path, { recursive: true, force: true });
      });
      return {};
    },

    async *watchDir(req, ctx) {
      const dir = resolveUserPath(req.path, userOf(ctx));
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
          if (ctx.signal.aborted) return;
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
          if (r === "abort") return;
          if (r === "timeout") yield { event: { case: "keepalive", value: {} } };
        }
      } finally {
        w.close();
      }
    },

    async createWatcher(req, ctx) {
      const dir = resolveUserPath(req.path, userOf(ctx));
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
