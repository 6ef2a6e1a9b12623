/**
 * envd's one HTTP port: Connect RPC (process.Process, filesystem.Filesystem; Connect
 * protocol, JSON and binary) plus plain routes (/health, /files, /envs, /metrics, /init)
 * and SPACE's own /space/processes/ended and /space/logs (envd's log ring, which also gets
 * one debug line per request: the node's own calls, /health and /space/*, excepted).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { Process } from "../gen/process/process_pb.ts";
import { Filesystem } from "../gen/filesystem/filesystem_pb.ts";
import { UNAUTHORIZED_MESSAGE, tokenMatches } from "./request-auth.ts";
import type { Envd } from "./context.ts";
import { toConnectError } from "./connect-errors.ts";
import { connectAdapter } from "./connect-adapter.ts";
import { processService } from "./process/process-service.ts";
import { filesystemService } from "./filesystem/filesystem-service.ts";
import { getFile, postFile } from "./http/files.ts";
import { getEnvs, getMetrics, postInit } from "./http/system.ts";
import { ENVD_INIT_PATH } from "../contract/envd-init.ts";
import { ENDED_PROCESSES_PATH } from "../contract/ended-process.ts";
import { ENVD_LOGS_PATH, LOGS_PAGE_MAX } from "../contract/envd-logs.ts";
import { sendJson } from "./http/respond.ts";

async function* mapStreamErrors<T>(it: AsyncIterable<T>): AsyncIterable<T> {
  try {
    yield* it;
  } catch (e: unknown) {
    throw toConnectError(e);
  }
}

export function createEnvdHandler(envd: Envd): (req: IncomingMessage, res: ServerResponse) => void {
  const auth: Interceptor = (next) => async (req) => {
    if (!tokenMatches(envd.state.accessToken, req.header.get("x-access-token"))) {
      throw new ConnectError(UNAUTHORIZED_MESSAGE, Code.Unauthenticated);
    }
    try {
      const res = await next(req);
      if (res.stream) return { ...res, message: mapStreamErrors(res.message) };
      return res;
    } catch (e: unknown) {
      throw toConnectError(e);
    }
  };
  const rpc = connectAdapter({
    routes: (router: ConnectRouter) => {
      router.service(Process, processService(envd));
      router.service(Filesystem, filesystemService(envd));
    },
    interceptors: [auth],
    jsonOptions: { ignoreUnknownFields: true },
    grpc: false,
    grpcWeb: false,
  });

  return (req, res) => {
    const url = new URL(req.url ?? "/", "http://envd");
    const p = url.pathname;
    if (p !== "/health" && !p.startsWith("/space/")) logRequest(envd, req, res, p);
    if (p.startsWith("/process.Process/") || p.startsWith("/filesystem.Filesystem/")) {
      rpc(req, res);
      return;
    }
    if (p === "/health" && (req.method === "GET" || req.method === "HEAD")) {
      res.writeHead(204);
      res.end();
      return;
    }
    if (p === "/files" && (req.method === "GET" || req.method === "HEAD")) {
      void getFile(envd, req, res, url);
      return;
    }
    if (p === "/files" && req.method === "POST") {
      void postFile(envd, req, res, url);
      return;
    }
    if (!tokenMatches(envd.state.accessToken, req.headers["x-access-token"] as string | undefined)) {
      sendJson(res, 401, { code: 401, message: UNAUTHORIZED_MESSAGE });
      return;
    }
    if (p === "/envs" && req.method === "GET") return getEnvs(envd, res);
    if (p === "/metrics" && req.method === "GET") {
      void getMetrics(envd, res);
      return;
    }
    if (p === ENDED_PROCESSES_PATH && req.method === "GET") return getEndedProcess(envd, res, url);
    if (p === ENVD_LOGS_PATH && req.method === "GET") return getLogs(envd, res, url);
    if (p === ENVD_INIT_PATH && req.method === "POST") {
      void postInit(envd, req, res);
      return;
    }
    sendJson(res, 404, { code: 404, message: `no route ${req.method} ${p}` });
  };
}

/** How the process tagged `?tag=` ended: 200 with the record, 404 when none is kept. */
function getEndedProcess(envd: Envd, res: ServerResponse, url: URL): void {
  const tag = url.searchParams.get("tag");
  if (!tag) {
    sendJson(res, 400, { code: 400, message: "query parameter tag is required" });
    return;
  }
  const rec = envd.processes.ended.get(tag);
  if (!rec) sendJson(res, 404, { code: 404, message: `no ended process with tag ${JSON.stringify(tag)} is kept` });
  else sendJson(res, 200, rec);
}

function logRequest(envd: Envd, req: IncomingMessage, res: ServerResponse, path: string): void {
  const t0 = performance.now();
  res.once("finish", () => {
    envd.log("request", { logger: loggerOf(path), method: req.method ?? "", path, status: String(res.statusCode), durationMs: String(Math.round(performance.now() - t0)) }, "debug");
  });
}

/** E2B's envd logger names (its CLI filters on them: `process`, `filesystem` by default). */
function loggerOf(path: string): string {
  if (path.startsWith("/process.Process/")) return "processSvc";
  if (path.startsWith("/filesystem.Filesystem/") || path === "/files") return "filesystemSvc";
  return "http";
}

/** A page of envd's log ring: `?after=<seq>&limit=` (the node's cursor). */
function getLogs(envd: Envd, res: ServerResponse, url: URL): void {
  const after = Number(url.searchParams.get("after") ?? 0);
  const limit = Number(url.searchParams.get("limit") ?? LOGS_PAGE_MAX);
  if (!Number.isInteger(after) || after < 0 || !Number.isInteger(limit) || limit < 0) {
    sendJson(res, 400, { code: 400, message: "after and limit must be non-negative integers" });
    return;
  }
  sendJson(res, 200, envd.logs.page(after, limit));
}

export function createEnvdServer(envd: Envd): Server {
  const server = createServer(createEnvdHandler(envd));
  // Streams and uploads may run for a long time: no request timeout.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  return server;
}
