/**
 * The sandbox gateway: one port for every sandbox's envd and public ports. It names the
 * sandbox (route.ts), checks it is running (and the traffic token for public ports when
 * `allowPublicTraffic` is false), and forwards to its node's proxy route
 * `ANY /v1/sandboxes/:id/proxy/:port/<path>` with the internal token. Bodies stream
 * both ways (pipe, no buffering); WebSocket upgrades pass through. When a sandbox ends
 * (SandboxService `ended` event) its in-flight requests are destroyed, and later calls
 * get 502 `{"message":"The sandbox was not found","sandboxId","code":502}`.
 *
 * The internal token travels in `X-Space-Node-Token` (contract NODE_TOKEN_HEADER), so the
 * client's own `Authorization` (envd's Basic user selection) passes through untouched.
 *
 * Clients speak HTTP/1.1 or HTTP/2 (h2c, or h2 over TLS; listener.ts); the node side is
 * HTTP/1.1. A killed sandbox's HTTP/2 streams end with RST_STREAM, which the SDKs read as
 * the connection to the sandbox dropping (then probe its health and report it gone).
 *
 * A sandbox on the node agent of this same process (`space up`) is reached straight at its
 * address (`localNode`), not through that node's proxy: one HTTP hop less on every command
 * and file call, over connections into its envd kept for that sandbox alone. Its streams are
 * cut when the node says the sandbox died, as the proxy does.
 */
import http from "node:http";
import { timingSafeEqual } from "node:crypto";
import type { Duplex } from "node:stream";
import net, { type AddressInfo, type Server } from "node:net";
import type { Logger } from "../../core/log.ts";
import { SpaceError } from "../../core/errors.ts";
import { spaceMetrics, type GatewayMetrics } from "../../core/metrics.ts";
import type { SandboxId } from "../../core/ids.ts";
import { ENVD_PORT, NODE_TOKEN_HEADER } from "../../contract/node-api.ts";
import type { SandboxRecord } from "../../sandboxes/model.ts";
import type { SandboxService } from "../../sandboxes/service.ts";
import { startServerSpan, type ServerSpan } from "../../core/tracing.ts";
import { abort, createListener, type GatewayRequest, type GatewayResponse } from "./listener.ts";
import { NO_ROUTE, resolveRoute } from "./route.ts";
import { preflightHeaders, responseCors } from "./cors.ts";
import { RouteCache } from "./route-cache.ts";
import { SecureSandboxes } from "./secure-sandboxes.ts";
import { signatureMatches } from "./signature.ts";

export const TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token";

export interface GatewayDeps {
  sandboxes: SandboxService;
  /** SPACE_SANDBOX_DOMAIN ("" → null): when set, Host routing requires this suffix. */
  sandboxDomain: string | null;
  log: Logger;
  /** How long a running sandbox's route is cached (route-cache.ts; misses never are). Default 2000 ms. */
  routeCacheMs?: number;
  /** PEM certificate chain and key (SPACE_GATEWAY_TLS_CERT/KEY): TLS with h2 and HTTP/1.1 by ALPN. */
  tls?: { cert: Buffer; key: Buffer } | null;
  /** Requests and body bytes by route class (core/metrics.ts); absent = unregistered. */
  metrics?: GatewayMetrics;
  /** The node agent of this process, if any: its sandboxes skip its proxy. */
  localNode?: LocalNode;
}

/** The node agent in the gateway's own process: where its running sandboxes listen. */
export interface LocalNode {
  /** The node's id (known once it has registered). */
  nodeId(): string | undefined;
  /** The address of `port` of a sandbox running on this node; throws a SpaceError otherwise. */
  target(sandboxId: string, port: number): { host: string; port: number };
  /** Calls `fn` once when the sandbox stops or dies on this node; returns the unsubscribe. */
  onDead(sandboxId: string, fn: () => void): () => void;
}

export interface Gateway {
  readonly server: Server;
  /** Listens; resolves to the bound port. */
  listen(port: number, host: string): Promise<number>;
  close(): Promise<void>;
}

type Live = { destroy(): void };

/** How long a start's envd connection, opened ahead (preconnect), waits for its first call before it is closed. */
const PRECONNECT_IDLE_MS = 30_000;

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  NODE_TOKEN_HEADER,
]);

/** Upstream (HTTP/1.1) answer headers that are the connection's, not the answer's: HTTP/2 forbids them. */
const CONNECTION_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "http2-settings", "te"]);

export function createGateway(deps: GatewayDeps): Gateway {
  const metrics = deps.metrics ?? spaceMetrics().gateway;
  const { sandboxes, log } = deps;
  const repo = sandboxes.repo;
  const cacheMs = deps.routeCacheMs ?? 2000;
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 256 });
  const routes = new RouteCache(repo, cacheMs);
  const secure = new SecureSandboxes(repo);
  const inflight = new Map<string, Set<Live>>();
  /**
   * Into a local sandbox, connections kept per sandbox, never shared: its address is reused
   * by later sandboxes, so a pooled socket must never carry a request (and its token) to
   * another one. Dropped when the sandbox ends (killed, paused, suspended) or its node says
   * it died. An idle one is closed before envd would close it (Node's agent takes envd's
   * `Keep-Alive: timeout` hint, less a second), so a reused socket is not answered with a reset.
   */
  const envdAgents = new Map<string, { agent: http.Agent; offDead: () => void }>();
  /** A start's connection into envd, opened ahead (`preconnect`): the sandbox's agent takes it for its first call. */
  const ahead = new Map<string, { socket: net.Socket; idle: () => void }>();
  const takeAhead = (id: string): net.Socket | undefined => {
    const a = ahead.get(id);
    if (!a) return undefined;
    ahead.delete(id);
    a.socket.setTimeout(0);
    a.socket.off("timeout", a.idle);
    return a.socket.destroyed ? undefined : a.socket;
  };
  const dropEnvdAgent = (id: string) => {
    takeAhead(id)?.destroy();
    const a = envdAgents.get(id);
    if (!a) return;
    envdAgents.delete(id);
    a.offDead();
    a.agent.destroy();
  };
  const envdAgentOf = (id: string, local: LocalNode): http.Agent => {
    let a = envdAgents.get(id);
    if (!a) {
      const agent = new http.Agent({ keepAlive: true });
      // Its first connection is the one opened ahead, when there is one.
      agent.createConnection = (options) => takeAhead(id) ?? net.createConnection(options as net.NetConnectOpts);
      a = { agent, offDead: local.onDead(id, () => dropEnvdAgent(id)) };
      envdAgents.set(id, a);
    }
    return a.agent;
  };
  const onEnded = (id: SandboxId) => {
    routes.forget(id);
    secure.forget(id);
    dropEnvdAgent(id);
    const set = inflight.get(id);
    if (!set) return;
    inflight.delete(id);
    for (const l of set) l.destroy();
  };
  const onStarted = (rec: SandboxRecord) => {
    routes.publish(rec);
    secure.publish(rec);
    if (rec.state === "running" && rec.nodeId) preconnect(rec.id, rec.nodeId);
  };
  /**
   * A local sandbox's first call would open the connection into its envd: ~2 ms of the first
   * command on a sandbox restored from its template's capture (`bench -- ttfc`, alternated
   * runs; its envd's first connection since the restore). It is opened when the sandbox
   * starts instead, a bare TCP connection the sandbox's agent then takes for that call (none
   * when the agent holds one already). It was a `/health` request: envd answered one more
   * request per create and adoption, inside a burst. Best effort: a failure costs only the
   * head start.
   */
  const preconnect = (id: SandboxId, nodeId: string) => {
    const local = deps.localNode;
    if (!local || nodeId !== local.nodeId()) return;
    let at: { host: string; port: number };
    try {
      at = local.target(id, ENVD_PORT);
    } catch {
      return;
    }
    const agent = envdAgentOf(id, local);
    if (ahead.has(id) || Object.keys(agent.sockets).length || Object.keys(agent.freeSockets).length) return;
    const socket = net.createConnection({ host: at.host, port: at.port, noDelay: true });
    const idle = () => socket.destroy();
    socket.setTimeout(PRECONNECT_IDLE_MS, idle);
    socket.on("error", () => undefined); // the call that takes it sees a closed socket and opens another
    socket.on("close", () => {
      if (ahead.get(id)?.socket === socket) ahead.delete(id);
    });
    ahead.set(id, { socket, idle });
  };
  sandboxes.events.on("ended", onEnded);
  sandboxes.events.on("started", onStarted);

  /** The running secure sandbox whose envd token satisfies `matches`. */
  function findSecure(matches: (token: string) => boolean): Promise<SandboxRecord | null> {
    return secure.find((rec) => rec.envdAccessToken !== null && matches(rec.envdAccessToken));
  }

  function findSigned(method: string, url: string): Promise<SandboxRecord | null> {
    const query = new URLSearchParams(url.slice(url.indexOf("?") + 1));
    return findSecure((token) => signatureMatches(method, query, token));
  }

  function findByToken(got: string): Promise<SandboxRecord | null> {
    const g = Buffer.from(got);
    return findSecure((token) => {
      const want = Buffer.from(token);
      return want.length === g.length && timingSafeEqual(want, g);
    });
  }

  /** Holds `l` until the returned untrack; `onDead` (a local sandbox) cuts it when the node says it died. */
  function track(id: string, l: Live, onDead?: (fn: () => void) => () => void): () => void {
    let set = inflight.get(id);
    if (!set) inflight.set(id, (set = new Set()));
    set.add(l);
    const offDead = onDead?.(() => l.destroy());
    return () => {
      offDead?.();
      set.delete(l);
      if (set.size === 0 && inflight.get(id) === set) inflight.delete(id);
    };
  }

  /** A local sandbox that is no longer running answers like one gone from its node's proxy. */
  function unlessGone(e: unknown): null {
    if (e instanceof SpaceError && (e.code === "not_found" || e.code === "failed_precondition")) return null;
    throw e;
  }

  type Resolved = { rec: SandboxRecord; port: number; path: string } | { status: number; body: Record<string, unknown> };

  async function resolve(req: GatewayRequest): Promise<Resolved> {
    const url = req.url ?? "/";
    const route = resolveRoute({ ...req.headers, host: hostOf(req) }, url, deps.sandboxDomain);
    if (route.kind === "none") return { status: 400, body: { code: 400, message: route.reason } };
    let rec: SandboxRecord | null;
    let port = ENVD_PORT;
    let path = route.path;
    if (route.kind === "signed") {
      rec = await findSigned(req.method ?? "GET", url);
      if (!rec) return { status: 401, body: { code: 401, message: "invalid signature" } };
    } else if (route.kind === "token") {
      rec = await findByToken(route.token);
      if (!rec) return { status: 400, body: { code: 400, message: `no running sandbox has this X-Access-Token; ${NO_ROUTE}` } };
    } else {
      rec = await routes.lookup(route.sandboxId);
      port = route.port;
      if (!rec || rec.state !== "running" || !rec.nodeId) return notFound(route.sandboxId);
    }
    if (port !== ENVD_PORT && rec.network?.allowPublicTraffic === false) {
      const got = req.headers[TRAFFIC_TOKEN_HEADER];
      if (!rec.trafficAccessToken || got !== rec.trafficAccessToken) {
        return {
          status: 403,
          body: { code: 403, message: `sandbox ${rec.id} requires the ${TRAFFIC_TOKEN_HEADER} header for port ${port}` },
        };
      }
    }
    if (!path.startsWith("/")) path = `/${path}`;
    return { rec, port, path };
  }

  /** Where the request goes: the sandbox itself when its node is this process's, else its node's proxy. */
  async function target(rec: SandboxRecord, port: number, path: string, req: GatewayRequest, span: ServerSpan | null = null) {
    const local = deps.localNode;
    let url: URL;
    let extra: Record<string, string> = {};
    let onDead: ((fn: () => void) => () => void) | undefined;
    let via: http.Agent | false = agent;
    if (local && rec.nodeId === local.nodeId()) {
      const at = local.target(rec.id, port);
      url = new URL(`http://${at.host}:${at.port}${path}`);
      // envd's connections are kept (envdAgents); a sandbox's own ports get one per request.
      via = port === ENVD_PORT ? envdAgentOf(rec.id, local) : false;
      onDead = (fn) => local.onDead(rec.id, fn);
    } else {
      const t = await sandboxes.substrate.proxyTarget({ sandboxId: rec.id, nodeId: rec.nodeId! }, port, AbortSignal.timeout(5000));
      url = new URL(t.baseUrl.href + path);
      extra = t.headers;
    }
    const headers: http.OutgoingHttpHeaders = {};
    // HTTP/2 pseudo-headers (`:path`, `:authority`, …) are not headers to an HTTP/1.1 upstream.
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP_BY_HOP.has(k) && !k.startsWith(":")) headers[k] = v;
    headers["x-forwarded-host"] = hostOf(req) ?? "";
    headers["x-forwarded-for"] = req.socket.remoteAddress ?? "";
    headers["x-forwarded-proto"] = deps.tls ? "https" : "http";
    for (const [k, v] of Object.entries(extra)) headers[k.toLowerCase()] = v;
    span?.inject(headers);
    return { url, headers, onDead, agent: via };
  }

  const onRequest = (req: GatewayRequest, res: GatewayResponse) => {
    handle(req, res).catch((e: unknown) => {
      log.error({ err: e, url: req.url }, "gateway request failed");
      if (!res.headersSent) sendJson(res, 500, { code: 500, message: "gateway error; see the server log" }, responseCors(req.headers));
      else abort(req, res);
    });
  };

  async function handle(req: GatewayRequest, res: GatewayResponse) {
    const preflight = preflightHeaders(req.method, req.headers);
    if (preflight) {
      const route = resolveRoute({ ...req.headers, host: hostOf(req) }, req.url ?? "/", deps.sandboxDomain);
      // A preflight carries no credential: it is answered before the sandbox is looked up.
      if (route.kind !== "none" && (!("port" in route) || route.port === ENVD_PORT)) {
        req.resume();
        res.writeHead(204, preflight);
        res.end();
        return;
      }
    }
    const span = startServerSpan(`gateway ${req.method ?? "GET"}`, "api", req.headers, { "http.request.method": req.method ?? "GET" });
    if (span) res.once("close", () => span.end(res.statusCode));
    const r = await resolve(req);
    if ("status" in r) {
      metrics.requests.inc({ route: "unrouted", status: String(r.status) });
      req.resume();
      return sendJson(res, r.status, r.body, responseCors(req.headers));
    }
    const { rec } = r;
    // Route class, not the port: ports are the user's and unbounded.
    const route = r.port === ENVD_PORT ? "envd" : "port";
    const to = await target(rec, r.port, r.path, req, span).catch(unlessGone);
    if (!to) {
      routes.forget(rec.id);
      const nf = notFound(rec.id);
      metrics.requests.inc({ route, status: String(nf.status) });
      req.resume();
      return sendJson(res, nf.status, nf.body, responseCors(req.headers));
    }
    const upstream = http.request(to.url, { method: req.method, headers: to.headers, agent: to.agent });
    const untrack = track(
      rec.id,
      {
        destroy() {
          upstream.destroy();
          abort(req, res);
        },
      },
      to.onDead,
    );
    res.on("close", () => {
      untrack();
      // The client went away: stop the upstream too (a process keeps running in envd).
      if (!res.writableFinished) upstream.destroy();
    });
    upstream.on("response", (up) => {
      metrics.requests.inc({ route, status: String(up.statusCode ?? 502) });
      const out: http.OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !CONNECTION_HEADERS.has(k)) out[k] = v;
      if (route === "envd") Object.assign(out, responseCors(req.headers));
      if (res instanceof http.ServerResponse) {
        res.socket?.setNoDelay(true);
        res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
        res.flushHeaders();
      } else {
        // HEADERS go out at once on HTTP/2 (a stream's first event must not wait for its first byte).
        res.writeHead(up.statusCode ?? 502, out);
      }
      up.pipe(res);
      up.on("data", (c: Buffer) => metrics.bytes.inc({ route, direction: "out" }, c.length));
      up.on("error", () => abort(req, res));
    });
    upstream.on("error", (e) => {
      untrack();
      if (res.headersSent) return abort(req, res);
      log.debug({ err: e, sandboxId: rec.id }, "gateway upstream failed");
      routes.forget(rec.id);
      const nf = notFound(rec.id);
      metrics.requests.inc({ route, status: String(nf.status) });
      sendJson(res, nf.status, nf.body, responseCors(req.headers));
    });
    req.pipe(upstream);
    // After the pipe, in the same tick: a data listener alone would start the flow and lose chunks.
    req.on("data", (c: Buffer) => metrics.bytes.inc({ route, direction: "in" }, c.length));
  }

  const onUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    upgrade(req, socket, head).catch((e: unknown) => {
      log.error({ err: e }, "gateway upgrade failed");
      socket.destroy();
    });
  };

  async function upgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer) {
    const r = await resolve(req);
    if ("status" in r) return writeRaw(socket, r.status, r.body);
    const to = await target(r.rec, r.port, r.path, req).catch(unlessGone);
    if (!to) return writeRaw(socket, 502, notFound(r.rec.id).body);
    const { url, headers } = to;
    headers.connection = "Upgrade";
    headers.upgrade = req.headers.upgrade ?? "websocket";
    const upstream = http.request(url, { method: req.method, headers });
    const untrack = track(r.rec.id, { destroy: () => { upstream.destroy(); socket.destroy(); } }, to.onDead);
    socket.on("close", untrack);
    upstream.on("upgrade", (up, upSocket, upHead) => {
      let head2 = `HTTP/1.1 101 Switching Protocols\r\n`;
      for (let i = 0; i < up.rawHeaders.length; i += 2) head2 += `${up.rawHeaders[i]}: ${up.rawHeaders[i + 1]}\r\n`;
      socket.write(head2 + "\r\n");
      if (upHead.length) socket.write(upHead);
      if (head.length) upSocket.write(head);
      upSocket.pipe(socket).pipe(upSocket);
      upSocket.on("error", () => socket.destroy());
      socket.on("error", () => upSocket.destroy());
      socket.on("close", () => upSocket.destroy());
    });
    upstream.on("response", (up) => {
      // Not upgraded: relay the answer and close.
      let s = `HTTP/1.1 ${up.statusCode} ${up.statusMessage}\r\n`;
      for (let i = 0; i < up.rawHeaders.length; i += 2) s += `${up.rawHeaders[i]}: ${up.rawHeaders[i + 1]}\r\n`;
      socket.write(s + "\r\n");
      up.pipe(socket);
    });
    upstream.on("error", () => {
      const nf = notFound(r.rec.id);
      writeRaw(socket, nf.status, nf.body);
    });
    upstream.end();
  }

  const listener = createListener({ onRequest, onUpgrade, tls: deps.tls ?? null });
  const { server } = listener;

  return {
    server,
    listen(port, host) {
      return new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, host, () => {
          server.off("error", reject);
          resolve((server.address() as AddressInfo).port);
        });
      });
    },
    async close() {
      sandboxes.events.off("ended", onEnded);
      sandboxes.events.off("started", onStarted);
      for (const set of inflight.values()) for (const l of set) l.destroy();
      inflight.clear();
      for (const id of [...envdAgents.keys()]) dropEnvdAgent(id);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        listener.closeAll();
      });
      agent.destroy();
    },
  };
}

function notFound(sandboxId: string) {
  return { status: 502, body: { message: "The sandbox was not found", sandboxId, code: 502 } };
}

/** The request's host: `Host` (HTTP/1.1) or `:authority` (HTTP/2). */
function hostOf(req: GatewayRequest): string | undefined {
  const authority = req.headers[":authority"];
  return req.headers.host ?? (typeof authority === "string" ? authority : undefined);
}

/**
 * The gateway's own answers (no route, not found, refused) carry CORS for a page's request
 * on every port: they hold no sandbox content, and without it the dashboard sees a network
 * error instead of the status and message.
 */
function sendJson(res: GatewayResponse, status: number, body: unknown, cors: http.OutgoingHttpHeaders) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...cors });
  res.end(text);
}

function writeRaw(socket: Duplex, status: number, body: unknown) {
  const text = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ""}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
  );
}
