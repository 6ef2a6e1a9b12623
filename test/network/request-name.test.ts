/** The egress proxy's pure parts: the name a connection carries, and the verdict for it. */
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { connect as tlsConnect } from "node:tls";
import { compileEcw, compileNative } from "../../src/sandboxes/egress-rules.ts";
import { guardrailCheck } from "../../src/node/network/egress-proxy.ts";
import { addSlotScript, natRules } from "../../src/node/network/nft.ts";
import { proxiesNamedPorts, verdictFor } from "../../src/contract/egress-policy.ts";
import { httpHost, requestName, tlsServerName } from "../../src/node/network/request-name.ts";

/** The first bytes Node's own TLS client sends for `servername` (a real-world ClientHello). */
async function realClientHello(servername: string): Promise<Buffer> {
  let first: Buffer | undefined;
  const srv = createServer((s) => s.once("data", (d: Buffer) => ((first = d), s.destroy())));
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => {
    const c = tlsConnect({ host: "127.0.0.1", port, servername, rejectUnauthorized: false });
    c.on("error", () => r());
    c.on("close", () => r());
  });
  srv.close();
  return first!;
}

test("HTTP Host: found in a complete head (port stripped, lowercased); more bytes asked for mid-head; non-HTTP has no name", () => {
  assert.deepEqual(requestName(Buffer.from("GET / HTTP/1.1\r\nUser-Agent: x\r\nHost: API.Example.test:8080\r\n\r\n")), { done: true, name: "api.example.test" });
  assert.deepEqual(httpHost(Buffer.from("GET / HTTP/1.1\r\nUser-Ag")), { done: false });
  assert.deepEqual(httpHost(Buffer.from("GE")), { done: false });
  assert.deepEqual(httpHost(Buffer.from("GET / HTTP/1.0\r\n\r\n")), { done: true, name: undefined });
  assert.deepEqual(requestName(Buffer.from("SSH-2.0-OpenSSH\r\n")), { done: true });
  assert.deepEqual(httpHost(Buffer.from("GET / HTTP/1.1\r\nHost: bad host!\r\n\r\n")), { done: true, name: undefined });
});

test("TLS SNI: read from a real ClientHello; partial records ask for more; a hello without SNI has no name", async () => {
  const hello = await realClientHello("Secure.Example.test");
  assert.deepEqual(requestName(hello), { done: true, name: "secure.example.test" });
  assert.deepEqual(tlsServerName(hello.subarray(0, 20)), { done: false });
  const noSni = await realClientHello("");
  assert.deepEqual(requestName(noSni), { done: true });
});

test("verdictFor mirrors the slot chain: first match, CIDR by address, domain by name, other ports and UDP rules skipped", () => {
  const e = compileEcw(false, { allowOut: ["*.ok.test", "198.18.0.0/24"] });
  assert.equal(verdictFor(e, { ip: "203.0.113.1", port: 443, name: "a.ok.test" }), "allow");
  assert.equal(verdictFor(e, { ip: "203.0.113.1", port: 443, name: "ok.test" }), "deny");
  assert.equal(verdictFor(e, { ip: "203.0.113.1", port: 8443, name: "a.ok.test" }), "deny");
  assert.equal(verdictFor(e, { ip: "198.18.0.9", port: 443, name: "evil.test" }), "allow");
  assert.equal(verdictFor(e, { ip: "203.0.113.1", port: 80 }), "deny");
  const n = compileNative({ allow_out: ["198.18.0.0/24"], rules: [{ action: "deny", target: "x.test", protocol: "tcp" }, { action: "allow", target: "y.test", protocol: "udp" }], default: "deny" });
  assert.equal(verdictFor(n, { ip: "198.18.0.1", port: 80, name: "x.test" }), "deny", "deny precedes allow");
  assert.equal(verdictFor(n, { ip: "203.0.113.1", port: 80, name: "y.test" }), "deny", "a UDP rule does not judge TCP");
});

test("only policies naming domains for TCP 80/443 are redirected to the proxy; guardrails as a predicate", () => {
  assert.equal(proxiesNamedPorts(compileEcw(false, { allowOut: ["a.test"] })), true);
  assert.equal(proxiesNamedPorts(compileEcw(false, { allowOut: ["198.18.0.1"] })), false);
  assert.equal(proxiesNamedPorts(compileNative({ rules: [{ action: "allow", target: "a.test", protocol: "udp" }] })), false);
  assert.equal(proxiesNamedPorts(compileNative({ rules: [{ action: "allow", target: "a.test", protocol: "tcp", ports: [8000] }] })), false);
  assert.deepEqual(natRules(compileEcw(true, null)), []);
  const script = addSlotScript("space_t", "sb1", "10.9.0.2", compileEcw(false, { allowOut: ["a.test"] }));
  assert.match(script, /add rule inet space_t np_sb1 meta l4proto tcp th dport \{ 80, 443 \} redirect to :15080/);
  assert.match(script, /add element inet space_t proxied \{ 10\.9\.0\.2 : jump np_sb1 \}/);
  const g = guardrailCheck({ slotCidr: "10.9.0.0/24", guardrails: ["192.0.2.0/24"], exceptions: ["192.0.2.7"] });
  assert.deepEqual(["10.9.0.1", "169.254.169.254", "127.0.0.1", "192.0.2.1", "192.0.2.7", "198.18.0.1"].map(g), [true, true, true, true, false, false]);
});
