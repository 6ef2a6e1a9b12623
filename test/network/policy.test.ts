/**
 * Network policy scenarios (behaviours.md E) against real namespaces: node slots in their
 * own host scope, the node resolver, and a fake internet namespace. The guest side runs
 * in each slot's namespace; every policy comes through the ECW or Native compiler.
 */
import assert from "node:assert/strict";
import { request } from "node:http";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { compileEcw, compileNative } from "../../src/sandboxes/egress-rules.ts";
import { OPEN_POLICY, proposeAllowList } from "../../src/contract/egress-policy.ts";
import { dnsOf, httpTo, INET, probe, SCOPE, serveIn, startRig, stopServer, tcpTo, tlsTo, udpTo, type Rig } from "./harness.ts";

const isRoot = process.getuid?.() === 0;
const ecw = (allowInternetAccess: boolean, allowOut?: string[], denyOut?: string[]) => compileEcw(allowInternetAccess, { allowOut, denyOut });
const OPEN = "open";
const REFUSED = "ECONNREFUSED";
/** The egress proxy's refusal: it accepted the handshake, judged the name, then reset. */
const RESET = "ECONNRESET";
const echo = (a: string) => `echo ${a} ping`;
/** From the node (host) side, like the node-api proxy. */
const httpGet = (host: string, port: number, path = "/") =>
  new Promise<string>((res, rej) => {
    const r = request({ host, port, path, agent: false, timeout: 3000 }, (resp) => {
      let b = "";
      resp.on("data", (d: Buffer) => (b += d.toString()));
      resp.on("end", () => res(b));
    });
    r.on("error", rej);
    r.end();
  });

describe("network policy", { skip: !isRoot && "needs root" }, () => {
  let rig: Rig;
  before(async () => {
    rig = await startRig();
  });
  after(async () => {
    await rig?.close();
  });

  test("internet_access_allowed + immediate_egress: the first packet after create gets out", async () => {
    const s = await rig.claim(ecw(true));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), udpTo(INET.a1)]), [OPEN, echo(INET.a1)]);
  });

  test("internet_access_denied: allow_internet_access=false refuses TCP and UDP", async () => {
    const s = await rig.claim(ecw(false));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.b1, 443), udpTo(INET.a1)]), [REFUSED, REFUSED, REFUSED]);
  });

  test("cidr_allow / udp_respects_cidr_allow", async () => {
    const s = await rig.claim(ecw(true, ["198.18.1.0/24"], ["0.0.0.0/0"]));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.a2), tcpTo(INET.b1), udpTo(INET.a2), udpTo(INET.b1)]), [OPEN, OPEN, REFUSED, echo(INET.a2), REFUSED]);
  });

  test("cidr_deny / udp_respects_cidr_deny", async () => {
    const s = await rig.claim(ecw(true, [], ["198.18.1.0/24"]));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.a2), tcpTo(INET.b1), udpTo(INET.a1), udpTo(INET.b1)]), [REFUSED, REFUSED, OPEN, REFUSED, echo(INET.b1)]);
  });

  test("exact_ip_allow / udp_respects_ip_allow", async () => {
    const s = await rig.claim(ecw(false, [INET.a1]));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.a2), udpTo(INET.a1), udpTo(INET.a2)]), [OPEN, REFUSED, echo(INET.a1), REFUSED]);
  });

  test("exact_ip_deny / udp_respects_ip_deny", async () => {
    const s = await rig.claim(ecw(true, [], [INET.a1]));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.a2), udpTo(INET.a1), udpTo(INET.a2)]), [REFUSED, OPEN, REFUSED, echo(INET.a2)]);
  });

  test("deny_precedes_allow / udp_deny_precedes_allow (Native v1, whatever the rule order)", async () => {
    const p = compileNative({
      rules: [
        { action: "allow", target: "198.18.1.0/24", protocol: "any" },
        { action: "deny", target: INET.a2, protocol: "any" },
      ],
      default: "deny",
    });
    const s = await rig.claim(p);
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.a2), udpTo(INET.a1), udpTo(INET.a2), tcpTo(INET.b1)]), [OPEN, REFUSED, echo(INET.a1), REFUSED, REFUSED]);
  });

  test("Native v1 protocol and ports: tcp 80 only", async () => {
    const p = compileNative({ rules: [{ action: "allow", target: "198.18.0.0/16", protocol: "tcp", ports: [80, "8000-8100"] }], default: "deny" });
    const s = await rig.claim(p);
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1, 80), tcpTo(INET.a1, 8080), tcpTo(INET.a1, 5000), udpTo(INET.a1)]), [OPEN, OPEN, REFUSED, REFUSED]);
  });

  test("platform_guardrail_precedes_allow: node, metadata and other sandboxes stay closed under allow-all", async () => {
    const node = createServer((c) => c.end());
    await new Promise<void>((r) => node.listen(0, "0.0.0.0", () => r()));
    const port = (node.address() as { port: number }).port;
    try {
      const other = await rig.claim(OPEN_POLICY);
      const s = await rig.claim(ecw(true, ["0.0.0.0/0", "169.254.169.254", rig.gateway, other.address, "192.0.2.0/24"]));
      const r = await probe(s.netns, [tcpTo(rig.gateway, port), tcpTo("192.0.2.2", port), tcpTo("169.254.169.254"), tcpTo(INET.a1)]);
      assert.deepEqual(r, [REFUSED, REFUSED, REFUSED, OPEN]);
      // Another sandbox is not even reachable at L2 (isolated bridge ports): no answer at all.
      const [toOther] = await probe(s.netns, [tcpTo(other.address, 49983)]);
      assert.notEqual(toOther, OPEN);
    } finally {
      node.close();
    }
  });

  test("domain_binding: an allowed domain's answers open it for their TTL (Native: every port, UDP too); other names stay denied; foreign DNS is refused", async () => {
    const s = await rig.claim(compileNative({ allow_out: ["allowed.test"], default: "deny" }));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1, 5000), udpTo(INET.a1)]), [REFUSED, REFUSED], "nothing is bound before resolution");
    const r = await probe(s.netns, [
      dnsOf("allowed.test", rig.gateway),
      tcpTo(INET.a1, 5000),
      udpTo(INET.a1),
      httpTo(INET.a1, "allowed.test"),
      dnsOf("other.test", rig.gateway),
      tcpTo(INET.b1, 5000),
      dnsOf("allowed.test", INET.dns),
      dnsOf("allowed.test", INET.dns, true),
    ]);
    assert.deepEqual(r, [INET.a1, OPEN, echo(INET.a1), `ok ${INET.a1} allowed.test`, INET.b1, REFUSED, REFUSED, REFUSED]);
    // ECW: a domain entry covers 80/443, judged by the name the connection carries.
    const e = await rig.claim(ecw(false, ["allowed.test"]));
    const r2 = await probe(e.netns, [dnsOf("allowed.test", rig.gateway), httpTo(INET.a1, "allowed.test"), tlsTo(INET.a1, "allowed.test"), tcpTo(INET.a1, 5000), httpTo(INET.b1, "other.test")]);
    assert.deepEqual(r2, [INET.a1, `ok ${INET.a1} allowed.test`, `open tcp ${INET.a1}`, REFUSED, RESET]);
  });

  test("domain_access_survives_default_deny: DNS keeps working when everything else is denied", async () => {
    const s = await rig.claim(ecw(false));
    assert.deepEqual(await probe(s.netns, [dnsOf("other.test", rig.gateway), tcpTo(INET.b1)]), [INET.b1, REFUSED]);
  });

  test("wildcard_domain_allow: *.wild.test binds subdomains at any depth, not the apex", async () => {
    const s = await rig.claim(ecw(false, ["*.wild.test"]));
    const r = await probe(s.netns, [
      dnsOf("api.wild.test", rig.gateway),
      dnsOf("deep.api.wild.test", rig.gateway),
      dnsOf("wild.test", rig.gateway),
      httpTo(INET.w1, "api.wild.test"),
      tlsTo(INET.w2, "deep.api.wild.test"),
      httpTo(INET.apex, "wild.test"),
      tcpTo(INET.w1, 5000),
      tcpTo(INET.apex, 5000),
    ]);
    // ECW domain entries cover 80/443 only: other ports fall back to IP rules (none here).
    assert.deepEqual(r, [INET.w1, INET.w2, INET.apex, `ok ${INET.w1} api.wild.test`, `open tcp ${INET.w2}`, RESET, REFUSED, REFUSED]);
  });

  test("tcp_dns_transport_respects_ip_allow: names resolved over TCP bind like UDP and never widen the IP allow list", async () => {
    const s = await rig.claim(ecw(false, ["198.18.1.0/24", "api.wild.test"]));
    const r = await probe(s.netns, [
      dnsOf("other.test", rig.gateway, true),
      tcpTo(INET.b1, 5000),
      httpTo(INET.b1, "other.test"),
      dnsOf("api.wild.test", rig.gateway, true),
      tcpTo(INET.w1, 5000),
      tcpTo(INET.a2, 5000),
      dnsOf("other.test", INET.dns, true),
    ]);
    assert.deepEqual(r, [INET.b1, REFUSED, RESET, INET.w1, REFUSED, OPEN, REFUSED]);
  });

  test("Native deny of a domain: its answers are denied even inside an allowed range", async () => {
    const s = await rig.claim(compileNative({ allow_out: ["198.18.0.0/16"], rules: [{ action: "deny", target: "other.test", protocol: "any" }], default: "deny" }));
    const r = await probe(s.netns, [tcpTo(INET.b1, 5000), dnsOf("other.test", rig.gateway), tcpTo(INET.b1, 5000), httpTo(INET.b1, "other.test"), httpTo(INET.a1, "allowed.test")]);
    assert.deepEqual(r, [OPEN, INET.b1, REFUSED, RESET, `ok ${INET.a1} allowed.test`]);
  });

  test("domain rules on 80/443 judge the HTTP Host / TLS SNI the connection carries (egress proxy), to its original address; guardrails first", async () => {
    const s = await rig.claim(ecw(false, ["allowed.test"]));
    const denied0 = rig.proxy.stats.denied;
    const r = await probe(s.netns, [
      httpTo(INET.a2, "allowed.test"),
      dnsOf("allowed.test", rig.gateway),
      httpTo(INET.a1, "other.test"),
      httpTo(INET.a1, "allowed.test:80"),
      tlsTo(INET.a1, "allowed.test"),
      tlsTo(INET.a1, "other.test"),
      tlsTo(INET.a2, "sub.allowed.test"),
      tcpTo(INET.a2, 5000),
      tlsTo("169.254.169.254", "allowed.test"),
      httpTo(rig.gateway, "allowed.test"),
    ]);
    assert.deepEqual(r, [
      `ok ${INET.a2} allowed.test`,
      INET.a1,
      RESET,
      `ok ${INET.a1} allowed.test:80`,
      `open tcp ${INET.a1}`,
      RESET,
      RESET,
      REFUSED,
      REFUSED,
      REFUSED,
    ]);
    assert.equal(rig.proxy.stats.denied - denied0, 3, "the proxy refused the three misnamed connections; guarded ones never reached it");
    // Native semantics through the same proxy: a deny of a name precedes an allow of its range.
    const n = await rig.claim(compileNative({ allow_out: ["198.18.1.0/24"], rules: [{ action: "deny", target: "*.blocked.test", protocol: "tcp", ports: [443] }], default: "deny" }));
    assert.deepEqual(await probe(n.netns, [tlsTo(INET.a1, "x.blocked.test"), tlsTo(INET.a1, "fine.test"), httpTo(INET.a1, "x.blocked.test"), tlsTo(INET.b1, "fine.test")]), [RESET, `open tcp ${INET.a1}`, `ok ${INET.a1} x.blocked.test`, RESET]);
  });

  test("observe mode: nothing is blocked, every destination is recorded (with the names resolved to it); the proposal applied as is allows exactly that", async () => {
    const observe = { ...compileNative({ allow_out: [INET.a1], default: "deny" }), mode: "observe" as const };
    const s = await rig.claim(observe);
    const r = await probe(s.netns, [tcpTo(INET.a2, 5000), udpTo(INET.a1), dnsOf("allowed.test", rig.gateway), httpTo(INET.a1, "allowed.test"), tcpTo(INET.a1, 80), tcpTo(INET.b1, 443)]);
    assert.deepEqual(r, [OPEN, echo(INET.a1), INET.a1, `ok ${INET.a1} allowed.test`, OPEN, OPEN]);
    const { observed, denied } = await rig.slots.observed(s.owner, AbortSignal.timeout(10_000));
    const key = (d: { ip: string; protocol: string; port: number }) => `${d.ip} ${d.protocol} ${d.port}`;
    assert.deepEqual(observed.map(key).sort(), [`${INET.a1} tcp 80`, `${INET.a1} udp 9999`, `${INET.a2} tcp 5000`, `${INET.b1} tcp 443`]);
    assert.equal(observed.find((d) => d.port === 80)!.count, 2);
    assert.deepEqual(observed.find((d) => d.port === 80)!.domains, ["allowed.test"]);
    assert.deepEqual(denied.map(key).sort(), [`${INET.a2} tcp 5000`, `${INET.b1} tcp 443`], "what enforcement would have refused");
    const proposal = proposeAllowList(observed);
    // a1 was resolved as allowed.test: its flows (TCP and UDP) are proposed under the name.
    assert.deepEqual(proposal.rules, [
      { action: "allow", target: INET.a2, protocol: "tcp", ports: [5000] },
      { action: "allow", target: INET.b1, protocol: "tcp", ports: [443] },
      { action: "allow", target: "allowed.test", protocol: "tcp", ports: [80] },
      { action: "allow", target: "allowed.test", protocol: "udp", ports: [9999] },
    ]);
    const applied = await rig.claim(compileNative(proposal));
    const after = await probe(applied.netns, [
      tcpTo(INET.a2, 5000),
      tcpTo(INET.a1, 5000),
      dnsOf("allowed.test", rig.gateway),
      udpTo(INET.a1),
      httpTo(INET.a1, "allowed.test"),
      httpTo(INET.a1, "other.test"),
      tlsTo(INET.b1, "any.test"),
    ]);
    assert.deepEqual(after, [OPEN, REFUSED, INET.a1, echo(INET.a1), `ok ${INET.a1} allowed.test`, RESET, `open tcp ${INET.b1}`]);
  });

  test("denied flows are counted and listable per sandbox (enforce mode)", async () => {
    const s = await rig.claim(ecw(false, [INET.a1]));
    const r = await probe(s.netns, [tcpTo(INET.a2, 5000), tcpTo(INET.a2, 5000), tcpTo(INET.a1, 5000), udpTo(INET.b1)]);
    assert.deepEqual(r.slice(0, 3), [REFUSED, REFUSED, OPEN]);
    assert.notEqual(r[3], echo(INET.b1));
    const { observed, denied } = await rig.slots.observed(s.owner, AbortSignal.timeout(10_000));
    assert.deepEqual(observed, [], "enforce mode records refusals only");
    assert.deepEqual(denied.map((d) => [d.ip, d.protocol, d.port, d.count]).sort(), [[INET.a2, "tcp", 5000, 2], [INET.b1, "udp", 9999, 1]]);
  });

  test("PUT replaces the whole policy of a live sandbox within a second, re-judging open flows", async () => {
    const s = await rig.claim(ecw(true));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1)]), [OPEN]);
    const t0 = performance.now();
    await rig.slots.setPolicy(s.owner, ecw(false, [INET.a2]), AbortSignal.timeout(10_000));
    const ms = performance.now() - t0;
    assert.ok(ms < 1000, `policy update took ${ms} ms`);
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.a2)]), [REFUSED, OPEN]);
    // A name bound before the update stays bound when the new policy still allows it.
    await rig.slots.setPolicy(s.owner, ecw(false, ["allowed.test"]), AbortSignal.timeout(10_000));
    assert.deepEqual(await probe(s.netns, [dnsOf("allowed.test", rig.gateway)]), [INET.a1]);
    await rig.slots.setPolicy(s.owner, ecw(false, ["allowed.test", "198.18.2.0/24"]), AbortSignal.timeout(10_000));
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1), tcpTo(INET.b1)]), [OPEN, OPEN]);
  });

  test("loopback_route_stays_open under deny-all", async () => {
    const s = await rig.claim(ecw(false));
    assert.deepEqual(await probe(s.netns, [{ kind: "loopback" }]), [OPEN]);
  });

  test("sandbox_network_isolation_holds: sandboxes cannot reach each other (TCP, UDP), the node can reach both", async () => {
    const a = await rig.claim(OPEN_POLICY);
    const b = await rig.claim(OPEN_POLICY);
    const srv = await serveIn(b.netns, { addresses: ["0.0.0.0"] });
    try {
      const r = await probe(a.netns, [tcpTo(b.address, 5000), udpTo(b.address), tcpTo(b.address, 8080)]);
      assert.ok(!r.includes(OPEN) && !r.some((x) => x.startsWith("echo")), `a sandbox reached another: ${r.join(" ")}`);
      assert.equal(await httpGet(b.address, 8080), "ok 0.0.0.0 " + `${b.address}:8080`);
    } finally {
      await stopServer(srv);
    }
  });

  test("public_port_to_loopback / _all_interfaces: the node reaches servers bound to 127.0.0.1 or 0.0.0.0 inside", async () => {
    const s = await rig.claim(ecw(false));
    const lo = await serveIn(s.netns, { addresses: [], loopbackHttpPort: 8000 });
    const all = await serveIn(s.netns, { addresses: ["0.0.0.0"] });
    try {
      assert.equal(await httpGet(s.address, 8000, "/x"), "loopback /x");
      assert.equal(await httpGet(s.address, 8080), `ok 0.0.0.0 ${s.address}:8080`);
    } finally {
      await stopServer(lo);
      await stopServer(all);
    }
  });

  test("guest_vlan_frames_dropped: VLAN-tagged and other non-IP frames from a guest are dropped at the bridge port", async () => {
    const s = await rig.claim(OPEN_POLICY);
    const count = async () => {
      const rules = await exec("nft", ["list", "table", "bridge", SCOPE.nftTable], { timeoutMs: 10_000 });
      return Number(/counter packets (\d+)/.exec(rules.stdout)?.[1] ?? -1);
    };
    const before = await count();
    const mac = (await exec("cat", [`/sys/class/net/${SCOPE.bridge}/address`], { timeoutMs: 5000 })).stdout.trim();
    const r = await exec("ip", ["netns", "exec", s.netns, "python3", "test/network/raw-frames.py", "eth0", mac], { timeoutMs: 20_000, cwd: process.cwd() });
    assert.match(r.stdout, /sent 3/);
    // (IPv6 frames the kernel itself sends from the guest may add to the count.)
    assert.ok((await count()) - before >= 3, "each non-IP frame is counted and dropped by the L2 guest filter");
    // IP traffic of the same guest still flows.
    assert.deepEqual(await probe(s.netns, [tcpTo(INET.a1)]), [OPEN]);
  });
});
