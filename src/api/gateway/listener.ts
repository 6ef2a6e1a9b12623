/**
 * The gateway's listening side: HTTP/1.1 and HTTP/2 on one port, as E2B's edge serves
 * them. Plain TCP: a connection that opens with the HTTP/2 preface (`PRI * HTTP/2.0…`,
 * h2c with prior knowledge) goes to an HTTP/2 server, any other to the HTTP/1.1 one; the
 * bytes read to decide are put back first. With TLS (a certificate and key), ALPN picks
 * `h2` or `http/1.1`. Every request reaches one handler through node:http2's
 * compatibility objects; WebSocket upgrades are HTTP/1.1 only.
 *
 * `abort` ends one request as a transport failure: an HTTP/2 stream is reset
 * (RST_STREAM INTERNAL_ERROR, what Go's HTTP/2 server sends when a proxied stream
 * breaks; the other streams of that connection go on), an HTTP/1.1 connection is
 * destroyed.
 */
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { Duplex } from "node:stream";

export type GatewayRequest = http.IncomingMessage | http2.Http2ServerRequest;
export type GatewayResponse = http.ServerResponse | http2.Http2ServerResponse;

export interface ListenerOptions {
  onRequest(req: GatewayRequest, res: GatewayResponse): void;
  onUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): void;
  /** PEM certificate chain and key: TLS with ALPN h2/http1.1; null = plain HTTP/1.1 and h2c. */
  tls: { cert: Buffer; key: Buffer } | null;
}

export interface Listener {
  readonly server: net.Server;
  /** Ends every open connection (HTTP/1.1 sockets, HTTP/2 sessions). */
  closeAll(): void;
}

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** No request timeout: streams (process output, watch) may last hours. */
const HTTP1_LIMITS = { keepAliveTimeout: 65_000, headersTimeout: 66_000, requestTimeout: 0 };

export function createListener(o: ListenerOptions): Listener {
  const sockets = new Set<Duplex>();
  const sessions = new Set<http2.ServerHttp2Session>();
  const keepSession = (s: http2.ServerHttp2Session) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  };
  const keepSocket = (s: Duplex) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  };
  const closeAll = () => {
    for (const s of sessions) s.destroy();
    for (const s of sockets) s.destroy();
  };

  if (o.tls) {
    const server = http2.createSecureServer({ cert: o.tls.cert, key: o.tls.key, allowHTTP1: true }, o.onRequest);
    server.on("upgrade", o.onUpgrade);
    server.on("session", keepSession);
    server.on("secureConnection", keepSocket);
    server.setTimeout(0);
    // Its HTTP/1.1 side reads http.Server's limits (requestTimeout defaults to 300 s there).
    Object.assign(server, HTTP1_LIMITS);
    return { server, closeAll };
  }

  const h1 = http.createServer(o.onRequest);
  h1.on("upgrade", o.onUpgrade);
  Object.assign(h1, HTTP1_LIMITS);
  const h2 = http2.createServer({}, o.onRequest);
  h2.on("session", keepSession);
  h2.setTimeout(0);
  const server = net.createServer((socket) => {
    keepSocket(socket);
    socket.setNoDelay(true);
    let seen = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      const n = Math.min(seen.length, PREFACE.length);
      const isH2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (isH2 && n < PREFACE.length) return; // a prefix of the preface so far: read on
      socket.off("data", onData);
      socket.off("error", onError);
      socket.pause();
      socket.unshift(seen);
      if (isH2) h2.emit("connection", socket);
      else {
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    const onError = () => socket.destroy();
    socket.on("data", onData);
    socket.on("error", onError);
  });
  return { server, closeAll };
}

/** Ends this request as a transport failure (see the top of this file). */
export function abort(req: GatewayRequest, res: GatewayResponse): void {
  if (res instanceof http2.Http2ServerResponse) {
    if (!res.stream.destroyed) res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  } else {
    req.socket.destroy();
  }
}
