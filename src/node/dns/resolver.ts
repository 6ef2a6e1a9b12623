/**
 * The per-node DNS resolver sandboxes must use (nft.ts rejects DNS to anything else): it
 * listens on the bridge address, port 53, UDP and TCP, forwards each query to its upstream
 * (SPACE_NODE_DNS_UPSTREAM, else the first nameserver of /etc/resolv.conf) over the same
 * transport, and before
 * answering hands the A records to the binder, which adds them to the asking sandbox's
 * domain-rule sets for their TTL. So a connection made with the answer finds its
 * address already allowed; a name no rule matches binds nothing (its addresses stay
 * under the IP/CIDR rules and the default).
 *
 *   const r = new NodeResolver({ listen: "10.200.0.1", upstream: { host: "1.1.1.1", port: 53 }, binder, logger });
 *   await r.start(); ... await r.stop();
 */
import { createSocket, type Socket } from "node:dgram";
import { connect, createServer, type Server } from "node:net";
import type { Logger } from "../../core/log.ts";
import { buildAnswer, frameTcp, parseAnswers, parseQuestion, servfail, splitTcp, type ARecord } from "./wire.ts";

export interface ResolverBinder {
  /** Whether `address` is a sandbox of this node (others are refused). */
  owns(address: string): boolean;
  /** Called with every answer before it is returned to the sandbox at `address`. */
  resolved(address: string, name: string, records: ARecord[]): Promise<void>;
}

export interface Upstream {
  host: string;
  port: number;
}

export interface NodeResolverOptions {
  listen: string;
  port?: number;
  upstream: Upstream;
  binder: ResolverBinder;
  logger: Logger;
  timeoutMs?: number;
}

/** First usable nameserver of a resolv.conf text (default port 53). */
export function upstreamFromResolvConf(text: string): Upstream | undefined {
  for (const line of text.split("\n")) {
    const m = /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(line);
    if (m) return { host: m[1]!, port: 53 };
  }
  return undefined;
}

/** `SPACE_NODE_DNS_UPSTREAM` (`ip` or `ip:port`, validated by the config schema); empty = none. */
export function upstreamFromConfig(value: string): Upstream | undefined {
  if (!value) return undefined;
  const [host, port] = value.split(":");
  return { host: host!, port: port ? Number(port) : 53 };
}

const REFUSED = 5;

export class NodeResolver {
  private udp: Socket | undefined;
  private tcp: Server | undefined;
  private readonly o: NodeResolverOptions;
  /** Queries answered, by outcome (metrics, bench). */
  readonly stats = { queries: 0, bound: 0, failed: 0, refused: 0 };

  constructor(o: NodeResolverOptions) {
    this.o = o;
  }

  get port(): number {
    return this.o.port ?? 53;
  }

  async start(): Promise<void> {
    const udp = createSocket({ type: "udp4", reuseAddr: false });
    udp.on("message", (msg, rinfo) => {
      void this.answer(msg, rinfo.address, "udp").then((out) => udp.send(out, rinfo.port, rinfo.address));
    });
    await new Promise<void>((res, rej) => {
      udp.once("error", rej);
      udp.bind(this.port, this.o.listen, () => {
        udp.off("error", rej);
        udp.on("error", (e) => this.o.logger.warn({ err: e }, "node resolver udp error"));
        res();
      });
    });
    this.udp = udp;
    const tcp = createServer((sock) => {
      let buf: Buffer = Buffer.alloc(0);
      const from = sock.remoteAddress?.replace(/^::ffff:/, "") ?? "";
      sock.setTimeout(30_000, () => sock.destroy());
      sock.on("error", () => undefined);
      sock.on("data", (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        if (buf.length > 1 << 17) return sock.destroy();
        const { messages, rest } = splitTcp(buf);
        buf = rest;
        for (const m of messages) void this.answer(m, from, "tcp").then((out) => sock.write(frameTcp(out)));
      });
    });
    await new Promise<void>((res, rej) => {
      tcp.once("error", rej);
      tcp.listen(this.port, this.o.listen, () => res());
    });
    this.tcp = tcp;
  }

  async stop(): Promise<void> {
    this.udp?.close();
    this.udp = undefined;
    const t = this.tcp;
    this.tcp = undefined;
    if (t) await new Promise<void>((res) => t.close(() => res()));
  }

  /** The reply to one query from `from`: forwarded, bound, answered (SERVFAIL when upstream fails). */
  async answer(query: Buffer, from: string, transport: "udp" | "tcp"): Promise<Buffer> {
    let name: string;
    try {
      name = parseQuestion(query).name;
    } catch {
      return Buffer.alloc(0);
    }
    this.stats.queries++;
    if (!this.o.binder.owns(from)) {
      this.stats.refused++;
      return buildAnswer(query, [], 0, REFUSED);
    }
    let reply: Buffer;
    try {
      reply = transport === "udp" ? await this.forwardUdp(query) : await this.forwardTcp(query);
    } catch (e) {
      this.stats.failed++;
      this.o.logger.debug({ err: e, name }, "node resolver: upstream failed");
      return servfail(query);
    }
    const records = parseAnswers(reply);
    if (records.length) {
      try {
        await this.o.binder.resolved(from, name, records);
        this.stats.bound++;
      } catch (e) {
        // An answer we could not bind would not work: say so instead of returning it.
        this.stats.failed++;
        this.o.logger.warn({ err: e, name, from }, "node resolver: binding failed");
        return servfail(query);
      }
    }
    return reply;
  }

  private forwardUdp(query: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const s = createSocket("udp4");
      const timer = setTimeout(() => done(new Error("upstream timeout")), this.o.timeoutMs ?? 3000);
      const done = (e: Error | undefined, b?: Buffer) => {
        clearTimeout(timer);
        s.close();
        if (e) reject(e);
        else resolve(b!);
      };
      s.on("error", (e) => done(e));
      s.on("message", (m) => {
        if (m.length >= 2 && m.readUInt16BE(0) === query.readUInt16BE(0)) done(undefined, m);
      });
      s.send(query, this.o.upstream.port, this.o.upstream.host);
    });
  }

  private forwardTcp(query: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const s = connect({ host: this.o.upstream.host, port: this.o.upstream.port });
      let buf: Buffer = Buffer.alloc(0);
      const timer = setTimeout(() => done(new Error("upstream timeout")), this.o.timeoutMs ?? 3000);
      const done = (e: Error | undefined, b?: Buffer) => {
        clearTimeout(timer);
        s.destroy();
        if (e) reject(e);
        else resolve(b!);
      };
      s.on("error", (e) => done(e));
      s.on("connect", () => s.write(frameTcp(query)));
      s.on("data", (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        const { messages } = splitTcp(buf);
        if (messages[0]) done(undefined, Buffer.from(messages[0]));
      });
      s.on("end", () => done(new Error("upstream closed")));
    });
  }
}
