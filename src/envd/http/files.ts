/**
 * `GET /files` and `POST /files` (e2b-wire.md §3): raw bytes down (gzip on request),
 * multipart or octet-stream up (gzip accepted), parents created. Files are opened with the
 * requesting user's rights (`envd.privileges.asUser`), so what it may not read or write is
 * 403 and what it creates is its own; the bytes then stream through the open descriptor.
 * `X-Metadata-*` replace the file's metadata (none clears it); each entry of the answer
 * carries the metadata read back from the file, as E2B's envd answers.
 */
import { createReadStream, createWriteStream, lstatSync, mkdirSync, openSync, statSync, type WriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { basename, dirname } from "node:path";
import { pipeline } from "node:stream/promises";
import { createGunzip, createGzip } from "node:zlib";
import { PassThrough, type Readable } from "node:stream";
import { SpaceError } from "../../core/errors.ts";
import { basicAuthUser, tokenMatches, verifySignature, type SignOp } from "../request-auth.ts";
import { requestUser, type Envd } from "../context.ts";
import { fsError } from "../connect-errors.ts";
import { resolveUserPath } from "../paths.ts";
import type { User } from "../users.ts";
import { validateMetadata, type Metadata } from "../filesystem/metadata.ts";
import { boundaryOf, parseMultipart } from "./multipart.ts";
import { sendError, sendJson } from "./respond.ts";

interface FileQuery {
  path: string | undefined;
  user: User;
}

/** Access token or a signed URL; then the user from `username` / Basic auth / default. */
function authorize(envd: Envd, req: IncomingMessage, url: URL, op: SignOp): FileQuery {
  const token = envd.state.accessToken;
  const pathQ = url.searchParams.get("path") ?? undefined;
  const usernameQ = url.searchParams.get("username") ?? undefined;
  if (token !== undefined && !tokenMatches(token, req.headers["x-access-token"] as string | undefined)) {
    verifySignature(
      {
        path: pathQ ?? "",
        op,
        user: usernameQ ?? "",
        signature: url.searchParams.get("signature"),
        expiration: url.searchParams.get("signature_expiration"),
      },
      token,
    );
  }
  const user = requestUser(envd, usernameQ || basicAuthUser(req.headers.authorization));
  return { path: pathQ, user };
}

export async function getFile(envd: Envd, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  try {
    const q = authorize(envd, req, url, "read");
    if (!q.path) throw new SpaceError("invalid_argument", "the path query parameter is required");
    const path = resolveUserPath(q.path, q.user);
    const { st, fd } = opened(envd, q.user, () => {
      let st;
      try {
        st = statSync(path);
      } catch (e: unknown) {
        if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new SpaceError("not_found", `path '${path}' does not exist`);
        throw e;
      }
      if (st.isDirectory()) throw new SpaceError("invalid_argument", `path '${path}' is a directory`);
      return { st, fd: openSync(path, "r") };
    });
    const gzip = /\bgzip\b/i.test(String(req.headers["accept-encoding"] ?? ""));
    const headers: Record<string, string | number> = {
      "content-type": "application/octet-stream",
      "content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(basename(path))}`,
    };
    if (gzip) {
      headers["content-encoding"] = "gzip";
      headers["vary"] = "Accept-Encoding";
    } else headers["content-length"] = st.size;
    const src = createReadStream(path, { fd, highWaterMark: 1024 * 1024 });
    res.writeHead(200, headers);
    if (req.method === "HEAD") {
      src.destroy();
      res.end();
      return;
    }
    if (gzip) await pipeline(src, createGzip({ level: 1 }), res);
    else await pipeline(src, res);
  } catch (e: unknown) {
    if (!res.headersSent) sendError(res, e);
    else res.destroy();
  }
}

/** `X-Metadata-<key>` → `{ <key, lowercased>: <first value> }`, validated (E2B's rules). */
function metadataHeaders(req: IncomingMessage): Metadata {
  const out: Metadata = {};
  for (const [k, v] of Object.entries(req.headersDistinct)) {
    if (!k.startsWith("x-metadata-") || !v?.length) continue;
    const key = k.slice("x-metadata-".length);
    if (key) out[key] = v[0]!;
  }
  validateMetadata(out);
  return out;
}

interface WrittenEntry {
  path: string;
  name: string;
  type: "file";
  metadata?: Metadata;
}

/** `f` with `user`'s rights; fs errors mapped to the taxonomy (403 for what it may not touch). */
function opened<T>(envd: Envd, user: User, f: () => T): T {
  try {
    return envd.privileges.asUser(user, f);
  } catch (e: unknown) {
    throw fsError(e);
  }
}

function openTarget(envd: Envd, path: string, user: User): WriteStream {
  const fd = opened(envd, user, () => {
    const existing = (() => {
      try {
        return lstatSync(path);
      } catch {
        return undefined;
      }
    })();
    if (existing?.isDirectory()) throw new SpaceError("invalid_argument", `path '${path}' is a directory`);
    mkdirSync(dirname(path), { recursive: true });
    return openSync(path, "w", 0o644);
  });
  return createWriteStream(path, { fd, highWaterMark: 1024 * 1024 });
}

function finishTarget(envd: Envd, path: string, meta: Metadata): WrittenEntry {
  envd.metadata.write(path, meta);
  const kept = envd.metadata.read(path);
  return { path, name: basename(path), type: "file", ...(kept && { metadata: kept }) };
}

export async function postFile(envd: Envd, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  // A failed write (disk full, client gone) must not leave a truncated file behind.
  let inProgress: string | undefined;
  let openStream: WriteStream | undefined;
  try {
    const q = authorize(envd, req, url, "write");
    const meta = metadataHeaders(req);
    const encoding = String(req.headers["content-encoding"] ?? "").toLowerCase();
    const gzip = encoding === "gzip" || encoding === "x-gzip";
    if (!gzip && encoding && encoding !== "identity") {
      throw new SpaceError("invalid_argument", `unsupported content-encoding ${JSON.stringify(encoding)}`);
    }
    // Never the request itself: a reader that stops early destroys its stream, and a
    // request destroyed unread resets the connection, so the answer below never arrived.
    const body: Readable = req.pipe(gzip ? createGunzip() : new PassThrough());
    // pipe() passes on no end of a request cut short: its reader would wait for ever.
    req.once("close", () => {
      if (!req.complete) body.destroy(new Error("the client went away before the body ended"));
    });
    const contentType = String(req.headers["content-type"] ?? "");
    const written: WrittenEntry[] = [];
    if (/^multipart\/form-data/i.test(contentType)) {
      const boundary = boundaryOf(contentType);
      if (!boundary) throw new SpaceError("invalid_argument", "multipart body without a boundary");
      let usedQueryPath = false;
      await parseMultipart(body, boundary, async (part) => {
        if (part.name !== "file") return undefined;
        let target = part.filename;
        if (q.path && !usedQueryPath) {
          target = q.path;
          usedQueryPath = true;
        }
        if (!target) throw new SpaceError("invalid_argument", "a file part needs a filename (the target path) or a path query");
        const path = resolveUserPath(target, q.user);
        const ws = openTarget(envd, path, q.user);
        inProgress = path;
        openStream = ws;
        return {
          write: (chunk) =>
            new Promise<void>((resolve, reject) => {
              if (ws.write(chunk)) return resolve();
              const onErr = (e: Error) => reject(e);
              ws.once("error", onErr);
              ws.once("drain", () => {
                ws.off("error", onErr);
                resolve();
              });
            }),
          end: async () => {
            await new Promise<void>((resolve, reject) => {
              ws.once("error", reject);
              ws.end(() => resolve());
            });
            written.push(finishTarget(envd, path, meta));
            inProgress = undefined;
          },
        };
      });
    } else {
      if (!q.path) throw new SpaceError("invalid_argument", "the path query parameter is required for a raw upload");
      const path = resolveUserPath(q.path, q.user);
      const ws = openTarget(envd, path, q.user);
      inProgress = path;
      try {
        await pipeline(body, ws);
      } catch (e: unknown) {
        await rm(path, { force: true }).catch(() => {});
        throw e;
      }
      inProgress = undefined;
      written.push(finishTarget(envd, path, meta));
    }
    sendJson(res, 200, written);
  } catch (e: unknown) {
    openStream?.destroy();
    if (inProgress) await rm(inProgress, { force: true }).catch(() => {});
    // The rest of the body is read and dropped: a socket closed with unread data is reset,
    // and a proxy in front (the gateway, the node's) then loses this answer and says 502.
    req.unpipe();
    req.resume();
    sendError(res, e);
  }
}
