/**
 * What a guest does, run inside a sandbox's network namespace (`ip netns exec <ns> node
 * --import tsx test/network/probe.ts '<json Check[]>'`): prints one JSON array of results.
 *   tcp  → "open" | error code      http → body | error code
 *   udp  → reply | "noreply" | code  dns → addresses joined by "," | "rcode N" | error code
 *   loopback → "open" when a server on 127.0.0.1 answers inside the namespace
 */
import { createSocket } from "node:dgram";
import { request } from "node:http";
import { connect, createServer } from "node:net";
import { buildQuery, frameTcp, parseAnswers, splitTcp } from "../../src/node/dns/wire.ts";

export type Check =
  | { kind: "tcp"; host: string; port: number }
  | { kind: "http"; host: string; port: number; hostHeader?: string }
  /** A TLS ClientHello naming `sni`: "open <first bytes the server sent>" | "closed" | error code. */
  | { kind: "tls"; host: string; port: number; sni: string }
  | { kind: "udp"; host: string; port: number; source?: string }
  | { kind: "dns"; name: string; server: string; tcp?: boolean }
  | { kind: "loopback" }
  /** Benchmarks: median and p99 in microseconds (`total` ms for the whole run). */
  | { kind: "bench"; what: "tcp" | "http" | "dns"; host: string; port: number; n: number; name?: string };

const TIMEOUT = 1500;
const code = (e: unknown) => (e as NodeJS.ErrnoException).code ?? String(e);

function tcp(host: string, port: number): Promise<string> {
  return new Promise((res) => {
    const s = connect({ host, port });
    const t = setTimeout(() => (s.destroy(), res("ETIMEDOUT")), TIMEOUT);
    s.on("connect", () => (clearTimeout(t), s.destroy(), res("open")));
    s.on("error", (e) => (clearTimeout(t), res(code(e))));
  });
}
function http(host: string, port: number, hostHeader?: string): Promise<string> {
  return new Promise((res) => {
    const r = request({ host, port, path: "/", headers: hostHeader ? { host: hostHeader } : {}, timeout: TIMEOUT, agent: false }, (resp) => {
      let b = "";
      resp.on("data", (d: Buffer) => (b += d.toString()));
      resp.on("end", () => res(b));
    });
    r.on("timeout", () => r.destroy(Object.assign(new Error("timeout"), { code: "ETIMEDOUT" })));
    r.on("error", (e) => res(code(e)));
    r.end();
  });
}
function clientHello(sni: string): Buffer {
  const name = Buffer.from(sni);
  const list = Buffer.concat([Buffer.from([0, name.length >> 8, name.length & 255]), name]);
  const sniExt = Buffer.concat([Buffer.from([list.length >> 8, list.length & 255]), list]);
  const exts = Buffer.concat([Buffer.from([0, 0, sniExt.length >> 8, sniExt.length & 255]), sniExt]);
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32, 7), Buffer.from([0, 0, 2, 0, 0x2f, 1, 0, exts.length >> 8, exts.length & 255]), exts]);
  const hs = Buffer.concat([Buffer.from([1, 0, body.length >> 8, body.length & 255]), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 1, hs.length >> 8, hs.length & 255]), hs]);
}
function tls(host: string, port: number, sni: string): Promise<string> {
  return new Promise((res) => {
    const s = connect({ host, port });
    let got = "";
    const done = (v: string) => (clearTimeout(t), s.destroy(), res(v));
    const t = setTimeout(() => done(got ? `open ${got.trim()}` : "ETIMEDOUT"), TIMEOUT);
    s.on("connect", () => s.write(clientHello(sni)));
    s.on("data", (d: Buffer) => {
      got += d.toString();
      if (got.includes("\n")) done(`open ${got.trim()}`);
    });
    s.on("end", () => done(got ? `open ${got.trim()}` : "closed"));
    s.on("error", (e) => done(code(e)));
  });
}
function udp(host: string, port: number, source?: string): Promise<string> {
  return new Promise((res) => {
    const s = createSocket("udp4");
    const done = (v: string) => (clearTimeout(t), s.close(), res(v));
    const t = setTimeout(() => done("noreply"), TIMEOUT);
    s.on("error", (e) => done(code(e)));
    s.on("message", (m) => done(m.toString()));
    s.bind(0, source, () => s.connect(port, host, () => s.send("ping")));
  });
}
async function dns(name: string, server: string, useTcp?: boolean): Promise<string> {
  const q = buildQuery(Math.floor(Math.random() * 65535), name);
  const reply: Buffer | string = useTcp
    ? await new Promise<Buffer | string>((res) => {
        const s = connect({ host: server, port: 53 });
        let buf: Buffer = Buffer.alloc(0);
        const t = setTimeout(() => (s.destroy(), res("ETIMEDOUT")), TIMEOUT);
        s.on("connect", () => s.write(frameTcp(q)));
        s.on("error", (e) => (clearTimeout(t), res(code(e))));
        s.on("data", (d: Buffer) => {
          buf = Buffer.concat([buf, d]);
          const m = splitTcp(buf).messages[0];
          if (m) {
            clearTimeout(t);
            s.destroy();
            res(Buffer.from(m));
          }
        });
      })
    : await new Promise<Buffer | string>((res) => {
        const s = createSocket("udp4");
        const done = (v: Buffer | string) => (clearTimeout(t), s.close(), res(v));
        const t = setTimeout(() => done("ETIMEDOUT"), TIMEOUT);
        s.on("error", (e) => done(code(e)));
        s.on("message", (m) => done(m));
        s.connect(53, server, () => s.send(q));
      });
  if (typeof reply === "string") return reply;
  const rcode = reply.readUInt16BE(2) & 15;
  if (rcode) return `rcode ${rcode}`;
  return parseAnswers(reply).map((r) => r.address).join(",");
}
async function loopback(): Promise<string> {
  const srv = createServer((s) => s.end());
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  const v = await tcp("127.0.0.1", port);
  srv.close();
  return v;
}

async function bench(c: Extract<Check, { kind: "bench" }>): Promise<string> {
  const times: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < c.n; i++) {
    const t = performance.now();
    const v = c.what === "tcp" ? await tcp(c.host, c.port) : c.what === "http" ? await http(c.host, c.port) : await dns(c.name!, c.host);
    if (v === "open" || v.startsWith("ok") || /^\d/.test(v)) times.push((performance.now() - t) * 1000);
    else return `failed: ${v}`;
  }
  const total = performance.now() - t0;
  times.sort((a, b) => a - b);
  return JSON.stringify({ n: c.n, medianUs: Math.round(times[times.length >> 1]!), p99Us: Math.round(times[Math.floor(times.length * 0.99)]!), totalMs: Math.round(total) });
}

const checks = JSON.parse(process.argv[2] ?? "[]") as Check[];
const out: string[] = [];
for (const c of checks) {
  if (c.kind === "tcp") out.push(await tcp(c.host, c.port));
  else if (c.kind === "http") out.push(await http(c.host, c.port, c.hostHeader));
  else if (c.kind === "tls") out.push(await tls(c.host, c.port, c.sni));
  else if (c.kind === "udp") out.push(await udp(c.host, c.port, c.source));
  else if (c.kind === "dns") out.push(await dns(c.name, c.server, c.tcp));
  else if (c.kind === "bench") out.push(await bench(c));
  else out.push(await loopback());
}
process.stdout.write(JSON.stringify(out));
