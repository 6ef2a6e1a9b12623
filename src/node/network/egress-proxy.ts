/**
 * The node's transparent egress proxy: a sandbox whose policy names domains for TCP
 * 80/443 has those connections redirected here by nft (nft.ts natRules; guarded
 * destinations are never redirected). For each connection the proxy reads the name it
 * asks for (HTTP Host / TLS SNI, request-name.ts), judges name, original address and port
 * against the sandbox's current policy (policy.ts verdictFor), then either connects to the
 * ORIGINAL destination and splices both ways, or resets the connection. Open connections
 * are re-judged when the sandbox's policy changes.
 *
 * The original destination comes from getsockopt(SO_ORIGINAL_DST), which Node has no API
 * for: a tiny N-API addon (native/original-dst.c, built into dist/node by
 * `npm run build:envd`) reads it from the accepted socket's file descriptor.
 *
 *   const p = new EgressProxy({ listen: gateway, policyOf, guarded, logger }); await p.start();
 */
import { connect, createServer, type Server, type Socket } from "node:net";
import { addonCandidates, loadNodeAddon } from "../../core/addons.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { inCidr } from "../../core/cidr.ts";
import { EGRESS_PROXY_PORT, METADATA_GUARDRAILS } from "./nft.ts";
import { verdictFor, type EgressPolicy } from "../../contract/egress-policy.ts";
import { MAX_PEEK, requestName } from "./request-name.ts";

export interface Destination {
  ip: string;
  port: number;
}

export interface EgressProxyOptions {
  /** The gateway address (nft redirects to the address of the bridge the packet came in on). */
  listen: string;
  port?: number;
  /** The current policy of the sandbox at `address`; undefined = not a sandbox of this node. */
  policyOf(address: string): EgressPolicy | undefined;
  /** Platform guardrails (checked again here: they precede every rule). */
  guarded(ip: string): boolean;
  /** Defaults to SO_ORIGINAL_DST through the addon. */
  originalDst?: (socket: Socket) => Destination;
  logger: Logger;
  /** How long a client may take to send the first bytes that name its destination. */
  peekTimeoutMs?: number;
}

interface Held {
  client: Socket;
  upstream: Socket;
  from: string;
  dst: Destination;
  name?: string;
  policy: EgressPolicy;
}

const RECHECK_MS = 250;

/** The platform guardrails as a predicate (slot range, metadata addresses, loopback, operator list minus exceptions). */
export function guardrailCheck(o: { slotCidr: string; guardrails?: string[]; exceptions?: string[] }): (ip: string) => boolean {
  const guarded = ["127.0.0.0/8", ...METADATA_GUARDRAILS, "0.0.0.0/8", o.slotCidr, ...(o.guardrails ?? [])];
  return (ip) => !(o.exceptions ?? []).some((c) => inCidr(ip, c)) && guarded.some((c) => inCidr(ip, c));
}

/** SO_ORIGINAL_DST of an accepted socket through the addon (loaded once). */
export function addonOriginalDst(): (socket: Socket) => Destination {
  const addon = loadNodeAddon<{ originalDst(fd: number): string }>("original-dst");
  if (!addon) throw new SpaceError("failed_precondition", `egress proxy: original-dst.node not found (looked in ${addonCandidates("original-dst").join(", ")}); run \`npm run build:envd\``);
  return (socket) => {
    // libuv's TCP handle exposes its descriptor as `fd` (Linux); there is no public accessor.
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== "number" || fd < 0) throw new Error("accepted socket has no file descriptor");
    const v = addon.originalDst(fd);
    const i = v.lastIndexOf(":");
    return { ip: v.slice(0, i), port: Number(v.slice(i + 1)) };
  };
}

export class EgressProxy {
  private server: Server | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly held = new Set<Held>();
  private readonly o: EgressProxyOptions;
  private readonly originalDst: (socket: Socket) => Destination;
  /** Connections by outcome (metrics, tests, bench). */
  readonly stats = { accepted: 0, allowed: 0, denied: 0, failed: 0, cut: 0 };

  constructor(o: EgressProxyOptions) {
    this.o = o;
    this.originalDst = o.originalDst ?? addonOriginalDst();
  }

  get port(): number {
    return this.o.port ?? EGRESS_PROXY_PORT;
  }

  async start(): Promise<void> {
    const server = createServer({ pauseOnConnect: true }, (s) => this.accept(s));
    server.on("error", (e) => this.o.logger.warn({ err: e }, "egress proxy error"));
    await new Promise<void>((res, rej) => {
      server.once("error", rej);
      server.listen(this.port, this.o.listen, () => {
        server.off("error", rej);
        res();
      });
    });
    this.server = server;
    this.timer = setInterval(() => this.recheck(), RECHECK_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    for (const h of this.held) {
      h.client.destroy();
      h.upstream.destroy();
    }
    this.held.clear();
    const s = this.server;
    this.server = undefined;
    if (s) await new Promise<void>((res) => s.close(() => res()));
  }

  private accept(client: Socket): void {
    this.stats.accepted++;
    client.on("error", () => undefined);
    const from = client.remoteAddress?.replace(/^::ffff:/, "") ?? "";
    let dst: Destination;
    try {
      dst = this.originalDst(client);
    } catch (e) {
      this.stats.failed++;
      this.o.logger.warn({ err: e, from }, "egress proxy: no original destination");
      client.resetAndDestroy();
      return;
    }
    // Not redirected (a direct connection to the proxy) or a guarded address: refused.
    if ((dst.ip === this.o.listen && dst.port === this.port) || this.o.guarded(dst.ip) || !this.o.policyOf(from)) return this.deny(client);
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => judge(undefined), this.o.peekTimeoutMs ?? 5000);
    let judged = false;
    const judge = (name: string | undefined) => {
      if (judged) return;
      judged = true;
      clearTimeout(timer);
      client.off("data", onData);
      client.off("end", onEnd);
      client.pause();
      this.judge(client, from, dst, name, buf);
    };
    const onData = (d: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      const peek = requestName(buf);
      if (peek.done) judge(peek.name);
      else if (buf.length >= MAX_PEEK) judge(undefined);
    };
    const onEnd = () => judge(undefined);
    client.on("data", onData);
    client.on("end", onEnd);
    client.on("close", () => clearTimeout(timer));
    client.resume();
  }

  private judge(client: Socket, from: string, dst: Destination, name: string | undefined, first: Buffer): void {
    const policy = this.o.policyOf(from);
    if (client.destroyed || !policy || verdictFor(policy, { ...dst, name }) === "deny") return this.deny(client);
    this.stats.allowed++;
    const upstream = connect({ host: dst.ip, port: dst.port });
    const h: Held = { client, upstream, from, dst, name, policy };
    this.held.add(h);
    let connected = false;
    upstream.on("error", () => undefined);
    upstream.once("connect", () => {
      connected = true;
      if (first.length) upstream.write(first);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.once("close", () => {
      this.held.delete(h);
      // Refused upstream: the client sees a refusal too; otherwise the pipe ended it.
      if (!connected) client.resetAndDestroy();
      else client.end();
    });
    client.once("close", () => {
      this.held.delete(h);
      upstream.destroy();
    });
  }

  private deny(client: Socket): void {
    this.stats.denied++;
    if (!client.destroyed) client.resetAndDestroy();
  }

  /** Cuts held connections their sandbox's current policy no longer allows. */
  private recheck(): void {
    for (const h of this.held) {
      const p = this.o.policyOf(h.from);
      if (p === h.policy) continue;
      if (p && verdictFor(p, { ...h.dst, name: h.name }) === "allow") {
        h.policy = p;
        continue;
      }
      this.stats.cut++;
      this.held.delete(h);
      h.client.resetAndDestroy();
      h.upstream.destroy();
    }
  }
}
