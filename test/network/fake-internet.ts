/**
 * Servers of the test "internet", run inside its network namespace (never a real host):
 *   node --import tsx test/network/fake-internet.ts '<json Config>'
 * On every address: HTTP on 80 and 8080 (body `ok <local address> <Host>`), plain TCP on
 * 443 and 5000 (greets `tcp <local address>`), UDP echo on 9999 (`echo <local address> <msg>`);
 * DNS on `dns` (UDP and TCP) answering `names` (A records, `ttl`). Prints `ready` once listening.
 */
import { createSocket } from "node:dgram";
import { createServer as createHttp } from "node:http";
import { createServer as createTcp } from "node:net";
import { buildAnswer, frameTcp, parseQuestion, splitTcp } from "../../src/node/dns/wire.ts";

export interface FakeInternetConfig {
  addresses: string[];
  dns?: string;
  names?: Record<string, string[]>;
  ttl?: number;
  /** Only a server on 127.0.0.1:<port> (public port tests, run inside a sandbox netns). */
  loopbackHttpPort?: number;
}

const cfg = JSON.parse(process.argv[2] ?? "{}") as FakeInternetConfig;
const listening: Promise<void>[] = [];
const listen = (srv: { listen(port: number, host: string, cb: () => void): unknown; once(e: "error", f: (e: Error) => void): unknown }, port: number, host: string) =>
  listening.push(new Promise<void>((res, rej) => {
    srv.once("error", rej);
    srv.listen(port, host, () => res());
  }));

if (cfg.loopbackHttpPort) {
  listen(createHttp((req, res) => res.end(`loopback ${req.url}`)), cfg.loopbackHttpPort, "127.0.0.1");
}
for (const a of cfg.addresses ?? []) {
  for (const port of [80, 8080]) {
    const h = createHttp((req, res) => res.end(`ok ${a} ${req.headers.host ?? ""}`));
    h.on("clientError", (_e, sock) => sock.destroy());
    listen(h, port, a);
  }
  for (const port of [443, 5000]) {
    listen(createTcp((s) => {
      s.on("error", () => undefined);
      s.end(`tcp ${a}\n`);
    }), port, a);
  }
  const u = createSocket("udp4");
  u.on("message", (m, r) => u.send(`echo ${a} ${m.toString()}`, r.port, r.address));
  listening.push(new Promise((res) => u.bind(9999, a, () => res())));
}
if (cfg.dns) {
  const answer = (q: Buffer): Buffer => {
    const name = parseQuestion(q).name;
    return buildAnswer(q, cfg.names?.[name], cfg.ttl ?? 60);
  };
  const u = createSocket("udp4");
  u.on("message", (m, r) => u.send(answer(m), r.port, r.address));
  listening.push(new Promise((res) => u.bind(53, cfg.dns, () => res())));
  const t = createTcp((s) => {
    let buf: Buffer = Buffer.alloc(0);
    s.on("error", () => undefined);
    s.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const { messages, rest } = splitTcp(buf);
      buf = rest;
      for (const m of messages) s.write(frameTcp(answer(m)));
    });
  });
  listen(t, 53, cfg.dns);
}
await Promise.all(listening);
process.stdout.write("ready\n");
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
