/**
 * Network policy end to end (behaviours.md E): the real stack (`space up`) driven by the
 * unmodified e2b SDK and by the Native API over HTTP, against a fake "internet" this suite
 * builds on the machine (a network namespace with 198.18.200.0/23 addresses serving HTTP,
 * TCP, UDP echo and DNS, routed from the host through a veth; nothing leaves the machine).
 * The stack's node resolver forwards to that DNS server (SPACE_NODE_DNS_UPSTREAM) and the
 * operator guards part of it (SPACE_NODE_GUARDRAILS) with one exception. The guest side is
 * test/network/guest-probe.py run inside each sandbox (one command per batch of checks).
 * One stack and one internet for the file; several scenarios per sandbox. Needs root.
 */
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError, type ConnectionOpts, type SandboxOpts } from "e2b";
import { startStack, type Stack } from "../support/stack.ts";
import { startInternet, type Internet } from "../network/harness.ts";
import { ALL, NativeClient, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, nftables)" : false;

/** The fake internet of this suite (198.18.0.0/15 is for benchmarking, never a real network). */
const A1 = "198.18.200.1";
const A2 = "198.18.200.2";
const B1 = "198.18.201.1";
const B2 = "198.18.201.2";
const W1 = "198.18.201.11";
const W2 = "198.18.201.12";
const APEX = "198.18.201.13";
const VIA_TCP = "198.18.201.14";
/** Guarded by the operator (SPACE_NODE_GUARDRAILS); G2 is the operator's exception. */
const G1 = "198.18.201.21";
const G2 = "198.18.201.22";
const D1 = "198.18.201.31";
const O1 = "198.18.201.41";
const DNS = "198.18.200.53";
const NAMES: Record<string, string[]> = {
  "allowed.test": [D1],
  "other.test": [O1],
  "api.wild.test": [W1],
  "deep.api.wild.test": [W2],
  "wild.test": [APEX],
  "viatcp.test": [VIA_TCP],
};
const A_NET = "198.18.200.0/24";
const B_NET = "198.18.201.0/24";

const PROBE = readFileSync(new URL("../network/guest-probe.py", import.meta.url), "utf8");
type Check = ["tcp" | "udp", string, number] | ["http" | "tls", string, number, string] | ["dns", string, string | null, boolean] | ["gateway"] | ["addr"];
const tcp = (h: string, p = 80): Check => ["tcp", h, p];
const udp = (h: string): Check => ["udp", h, 9999];
const dns = (name: string, tcpTransport = false, server: string | null = null): Check => ["dns", name, server, tcpTransport];
const OPEN = "open";
const REFUSED = "refused";
/** The node's egress proxy refused the name a connection carried (after the handshake). */
const RESET = "reset";
/**
 * A UDP datagram (or UDP DNS query) that got no answer: refused by an ICMP error, or
 * silent when the node's ICMP errors hit the kernel's per-destination rate limit.
 */
const NO_REPLY = "no reply";
const normalize = (checks: Check[], results: string[]) =>
  results.map((r, i) => {
    const c = checks[i]!;
    const overUdp = c[0] === "udp" || (c[0] === "dns" && !c[3]);
    return overUdp && ["refused", "noreply", "timeout"].includes(r) ? NO_REPLY : r;
  });
const echo = (a: string) => `echo ${a} ping`;

/** Runs checks inside an SDK sandbox (the probe script is written once per sandbox). */
async function probe(sb: Sandbox, checks: Check[]): Promise<string[]> {
  if (!probed.has(sb.sandboxId)) {
    await sb.files.write("/tmp/probe.py", PROBE);
    probed.add(sb.sandboxId);
  }
  const r = await sb.commands.run(`python3 /tmp/probe.py '${JSON.stringify(checks)}'`, { timeoutMs: 120_000 });
  return normalize(checks, JSON.parse(r.stdout) as string[]);
}
const probed = new Set<string>();

/** Runs checks inside a Native sandbox (one command operation). */
async function nprobe(n: NativeClient, id: string, checks: Check[]): Promise<string[]> {
  const r = await n.run(id, { cmd: "python3", args: ["-c", PROBE, JSON.stringify(checks)] });
  assert.match(r.stdout, /^\[/, r.stderr);
  return normalize(checks, JSON.parse(r.stdout) as string[]);
}

/** A TCP server on every host address: what the node guardrail must keep sandboxes from. */
async function hostServer(): Promise<{ port: number; close(): void }> {
  const s: Server = createServer((c) => c.end("host\n"));
  await new Promise<void>((r) => s.listen(0, "0.0.0.0", () => r()));
  return { port: (s.address() as { port: number }).port, close: () => s.close() };
}

describe("network policy end to end (space up, fake internet)", { skip, timeout: 15 * 60_000 }, () => {
  let stack: Stack;
  let inet: Internet;
  let host: { port: number; close(): void };
  before(async () => {
    inet = await startInternet({
      ns: "spe2e-inet",
      hostVeth: "spe2euh0",
      link: "198.19.254.0",
      route: "198.18.200.0/23",
      addresses: [A1, A2, B1, B2, W1, W2, APEX, VIA_TCP, G1, G2, D1, O1],
      dns: DNS,
      names: NAMES,
    });
    host = await hostServer();
    stack = await startStack({
      env: { SPACE_NODE_DNS_UPSTREAM: DNS, SPACE_NODE_GUARDRAILS: "198.18.201.20/30", SPACE_NODE_GUARDRAIL_EXCEPTIONS: G2 },
    });
  });
  after(async () => {
    host?.close();
    await stack?.stop();
    await inet?.close();
  });

  describe("through the e2b SDK (ECW, E2B semantics)", () => {
    let opts: ConnectionOpts & { sandboxUrl: string };
    const created: Sandbox[] = [];
    const create = async (o: Partial<SandboxOpts> = {}) => {
      const sb = await Sandbox.create("base", { ...opts, timeoutMs: 600_000, ...o });
      created.push(sb);
      return sb;
    };
    /** One sandbox whose policy the scenarios below replace in turn (PUT /sandboxes/{id}/network). */
    let sb: Sandbox;
    const policy = (n: { allowOut?: string[]; denyOut?: string[]; allowInternetAccess?: boolean }) => sb.updateNetwork(n);

    before(() => {
      opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    });
    after(async () => {
      await Promise.allSettled(created.map((s) => s.kill()));
    });

    test("internet_access_allowed + immediate_egress: the default reaches the upstream over TCP and UDP right after create", async () => {
      sb = await create();
      assert.deepEqual(await probe(sb, [tcp(A1), udp(A1), tcp(B1, 8080), tcp(B2, 5000)]), [OPEN, echo(A1), OPEN, OPEN]);
    });

    test("internet_access_denied + domain_access_survives_default_deny: allowInternetAccess:false refuses TCP and UDP; the node resolver still answers", async () => {
      const d = await create({ allowInternetAccess: false });
      assert.deepEqual(await probe(d, [tcp(A1), tcp(B1, 5000), udp(A1), dns("other.test"), dns("other.test", true), tcp(O1)]), [REFUSED, REFUSED, NO_REPLY, O1, O1, REFUSED]);
      assert.equal((await d.getInfo()).allowInternetAccess, false);
    });

    test("cidr_allow + udp_respects_cidr_allow, exact_ip_allow + udp_respects_ip_allow (allowOut exceptions to denyOut 0.0.0.0/0)", async () => {
      await policy({ denyOut: ["0.0.0.0/0"], allowOut: [A_NET] });
      assert.deepEqual(await probe(sb, [tcp(A1), tcp(A2, 8080), udp(A2), tcp(B1), udp(B1)]), [OPEN, OPEN, echo(A2), REFUSED, NO_REPLY]);
      await policy({ denyOut: ["0.0.0.0/0"], allowOut: [A1] });
      assert.deepEqual(await probe(sb, [tcp(A1), udp(A1), tcp(A2), udp(A2), tcp(B1)]), [OPEN, echo(A1), REFUSED, NO_REPLY, REFUSED]);
      const info = await sb.getInfo();
      assert.deepEqual(info.network?.denyOut, ["0.0.0.0/0"]);
      assert.deepEqual(info.network?.allowOut, [A1]);
    });

    test("cidr_deny + udp_respects_cidr_deny, exact_ip_deny + udp_respects_ip_deny", async () => {
      await policy({ denyOut: [A_NET] });
      assert.deepEqual(await probe(sb, [tcp(A1), tcp(A2), udp(A1), tcp(B1), udp(B1)]), [REFUSED, REFUSED, NO_REPLY, OPEN, echo(B1)]);
      await policy({ denyOut: [A1] });
      assert.deepEqual(await probe(sb, [tcp(A1), udp(A1), tcp(A2), udp(A2)]), [REFUSED, NO_REPLY, OPEN, echo(A2)]);
    });

    test("deny_precedes_allow + udp_deny_precedes_allow under E2B semantics: an allowOut entry is the documented exception to denyOut; the rest of a denied range stays denied", async () => {
      // E2B: "Allowed entries always take precedence over denied entries" — the Native
      // suite below asserts SPACE's deny-precedes-allow order.
      await policy({ denyOut: [A_NET], allowOut: [A1] });
      assert.deepEqual(await probe(sb, [tcp(A1), udp(A1), tcp(A2), udp(A2), tcp(B1)]), [OPEN, echo(A1), REFUSED, NO_REPLY, OPEN]);
    });

    test("domain_binding (ECW: HTTP Host / TLS SNI on 80/443, other ports fall back to IP rules): the allowed name passes, other names are reset, foreign DNS refused", async () => {
      await policy({ denyOut: ["0.0.0.0/0"], allowOut: ["allowed.test"] });
      const r = await probe(sb, [
        dns("allowed.test"),
        ["http", D1, 80, "allowed.test"],
        ["tls", D1, 443, "allowed.test"],
        tcp(D1, 5000),
        dns("other.test"),
        ["http", O1, 80, "other.test"],
        ["tls", O1, 443, "other.test"],
        // The allowed name's own address asked for under another name: judged by the name.
        ["http", D1, 80, "other.test"],
        dns("allowed.test", false, DNS),
        dns("allowed.test", true, DNS),
      ]);
      assert.deepEqual(r, [D1, `ok ${D1} allowed.test`, `open tcp ${D1}`, REFUSED, O1, RESET, RESET, RESET, NO_REPLY, REFUSED]);
      // The guest's own resolver path (glibc via resolv.conf) and a real HTTP client.
      const curl = await sb.commands.run("curl -sS -m 5 http://allowed.test/");
      assert.equal(curl.stdout, `ok ${D1} allowed.test`);
    });

    test("wildcard_domain_allow: *.wild.test binds subdomains at any depth, not the apex", async () => {
      await policy({ denyOut: ["0.0.0.0/0"], allowOut: ["*.wild.test"] });
      const r = await probe(sb, [dns("api.wild.test"), dns("deep.api.wild.test"), dns("wild.test"), ["http", W1, 80, "api.wild.test"], ["tls", W2, 443, "deep.api.wild.test"], ["http", APEX, 80, "wild.test"]]);
      assert.deepEqual(r, [W1, W2, APEX, `ok ${W1} api.wild.test`, `open tcp ${W2}`, RESET]);
    });

    test("tcp_dns_transport_respects_ip_allow: names resolved over TCP bind like UDP and never widen the IP allow list", async () => {
      await policy({ denyOut: ["0.0.0.0/0"], allowOut: [A_NET, "viatcp.test"] });
      const r = await probe(sb, [
        dns("other.test", true),
        tcp(O1, 5000),
        ["http", O1, 80, "other.test"],
        dns("viatcp.test", true),
        ["http", VIA_TCP, 80, "viatcp.test"],
        tcp(VIA_TCP, 5000),
        tcp(A2, 5000),
        dns("other.test", true, DNS),
      ]);
      assert.deepEqual(r, [O1, REFUSED, RESET, VIA_TCP, `ok ${VIA_TCP} viatcp.test`, REFUSED, OPEN, REFUSED]);
    });

    test("platform_guardrail_precedes_allow: the node, metadata, other sandboxes and operator-guarded addresses stay closed under allow-all; the operator's exception follows the policy", async () => {
      const [gateway] = await probe(sb, [["gateway"]]);
      await policy({ allowOut: ["0.0.0.0/0", `${gateway}`, "169.254.169.254", G1, G2, "allowed.test"] });
      const r = await probe(sb, [tcp(gateway!, host.port), tcp("169.254.169.254"), tcp(G1), tcp(G1, 5000), ["http", G1, 80, "allowed.test"], tcp(G2, 5000), ["http", G2, 80, "allowed.test"], tcp(A1, 5000)]);
      assert.deepEqual(r, [REFUSED, REFUSED, REFUSED, REFUSED, REFUSED, OPEN, `ok ${G2} allowed.test`, OPEN]);
      // An exception is not an allow: a policy that denies it still denies it.
      await policy({ denyOut: ["0.0.0.0/0"], allowOut: [A1] });
      assert.deepEqual(await probe(sb, [tcp(G2), tcp(A1)]), [REFUSED, OPEN]);
    });

    test("updateNetwork replaces (not merges) the policy of a live sandbox within a second; a refused update changes nothing", async () => {
      await policy({});
      assert.deepEqual(await probe(sb, [tcp(A2)]), [OPEN]);
      const t0 = Date.now();
      await policy({ allowInternetAccess: false });
      assert.ok(Date.now() - t0 < 5000);
      assert.deepEqual(await probe(sb, [tcp(A2)]), [REFUSED]);
      const put = (body: unknown) =>
        fetch(`${stack.apiUrl}/sandboxes/${sb.sandboxId}/network`, {
          method: "PUT",
          headers: { "x-api-key": stack.apiKey, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      assert.equal((await put({ denyOut: ["example.test"] })).status, 400);
      assert.deepEqual(await probe(sb, [tcp(A1)]), [REFUSED], "a refused update leaves the policy as it was");
      assert.equal((await put({ allowOut: [B1], denyOut: ["0.0.0.0/0"] })).status, 204);
      assert.deepEqual(await probe(sb, [tcp(B1), tcp(A1)]), [OPEN, REFUSED]);
    });

    test("a domain in denyOut is refused with 400 at create (SDK and wire)", async () => {
      await assert.rejects(Sandbox.create("base", { ...opts, network: { denyOut: ["example.test"] } }), (e: unknown) => e instanceof SandboxError && (e as SandboxError & { statusCode?: number }).statusCode === 400 && /denyOut/.test(e.message));
      const res = await fetch(`${stack.apiUrl}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": stack.apiKey, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base", network: { denyOut: ["example.test"] } }),
      });
      assert.equal(res.status, 400, await res.text());
    });

    test("rules_survive_restore: pause → connect keeps the create-time policy (IP and domain rules) and a later update", async () => {
      const r = await create({ network: { denyOut: ["0.0.0.0/0"], allowOut: [A1, "allowed.test"] } });
      assert.deepEqual(await probe(r, [tcp(A2, 5000)]), [REFUSED]);
      assert.equal(await r.pause(), true);
      const back = await Sandbox.connect(r.sandboxId, { ...opts, timeoutMs: 600_000 });
      assert.deepEqual(await probe(back, [tcp(A1, 5000), tcp(A2, 5000), udp(A1), dns("allowed.test"), ["http", D1, 80, "allowed.test"], ["http", O1, 80, "other.test"]]), [OPEN, REFUSED, echo(A1), D1, `ok ${D1} allowed.test`, RESET]);
      await back.updateNetwork({ denyOut: ["0.0.0.0/0"], allowOut: [A2] });
      assert.equal(await back.pause(), true);
      const again = await Sandbox.connect(r.sandboxId, { ...opts, timeoutMs: 600_000 });
      assert.deepEqual(await probe(again, [tcp(A2), tcp(A1)]), [OPEN, REFUSED]);
    });

    test("sandbox_network_isolation_holds: sandboxes cannot reach each other (envd, TCP, UDP), even allowed everything", async () => {
      const a = await create({ network: { allowOut: ["0.0.0.0/0"] } });
      const [ipB] = await probe(sb, [["addr"]]);
      assert.match(ipB!, /^\d+\.\d+\.\d+\.\d+$/);
      await policy({ allowOut: ["0.0.0.0/0"] });
      const r = await probe(a, [tcp(ipB!, 49983), udp(ipB!), tcp(A1)]);
      assert.notEqual(r[0], OPEN, "envd of another sandbox is unreachable");
      assert.ok(!r[1]!.startsWith("echo"), r[1]);
      assert.equal(r[2], OPEN, "the isolation is not a blanket block");
    });
  });

  describe("through the Native API (policy v1, SPACE semantics)", () => {
    let n: NativeClient;
    /** A: allow_internet_access false + explicit rules; B: default allow with denies; C: no network spec. */
    let a: string;
    let b: string;
    let c: string;
    /** O: observe mode over a default-deny policy. */
    let o: string;
    before(async () => {
      const { token } = await tenantWithToken(stack.apiUrl, stack.adminToken, "net-native", ALL);
      n = new NativeClient(stack.apiUrl, token);
      [a, b, c] = await Promise.all([
        n.create({
          network: {
            allow_internet_access: false,
            rules: [
              { action: "allow", target: A_NET },
              { action: "deny", target: A2 },
              { action: "allow", target: B1 },
              { action: "allow", target: "allowed.test", protocol: "tcp", ports: [80, 443] },
              { action: "allow", target: "*.wild.test" },
              { action: "allow", target: "viatcp.test", protocol: "tcp" },
              { action: "allow", target: "10.0.0.0/8" },
              { action: "allow", target: "169.254.0.0/16" },
              { action: "allow", target: "198.18.201.20/30" },
            ],
          },
        }),
        n.create({ network: { deny_out: [B_NET, A1] } }),
        n.create(),
      ]);
      o = await n.create({ network: { mode: "observe", allow_internet_access: false, allow_out: [A1] } });
    });
    after(async () => {
      await Promise.allSettled([a, b, c, o].filter(Boolean).map((id) => n.req("DELETE", `/v1/sandboxes/${id}`)));
    });

    test("a bad rule target is a 400 naming it, before anything is created", async () => {
      const bad = await n.req("POST", "/v1/sandboxes", { body: { template: "base", network: { rules: [{ action: "allow", target: "not a target" }] } } });
      assert.equal(bad.status, 400, JSON.stringify(bad.body));
      assert.match(JSON.stringify(bad.body), /not a target/);
    });

    test("internet_access_allowed (no network spec) + sandbox_network_isolation_holds", async () => {
      const [ipC] = await nprobe(n, c, [["addr"]]);
      assert.deepEqual(await nprobe(n, c, [tcp(A1), udp(A1), tcp(B2, 5000)]), [OPEN, echo(A1), OPEN]);
      const r = await nprobe(n, b, [tcp(ipC!, 49983), udp(ipC!)]);
      assert.notEqual(r[0], OPEN);
      assert.ok(!r[1]!.startsWith("echo"), r[1]);
    });

    test("internet_access_denied, cidr_allow + udp_respects_cidr_allow, exact_ip_allow + udp_respects_ip_allow, deny_precedes_allow + udp_deny_precedes_allow", async () => {
      const r = await nprobe(n, a, [tcp(B2, 5000), udp(B2), tcp(A1, 5000), udp(A1), tcp(B1, 5000), udp(B1), tcp(A2, 5000), udp(A2), ["http", A1, 80, "x.test"], ["http", A2, 80, "x.test"]]);
      assert.deepEqual(r, [REFUSED, NO_REPLY, OPEN, echo(A1), OPEN, echo(B1), REFUSED, NO_REPLY, `ok ${A1} x.test`, RESET]);
    });

    test("cidr_deny + udp_respects_cidr_deny, exact_ip_deny + udp_respects_ip_deny (default allow)", async () => {
      const r = await nprobe(n, b, [tcp(B1), udp(B1), tcp(A1), udp(A1), tcp(A2), udp(A2)]);
      assert.deepEqual(r, [REFUSED, NO_REPLY, REFUSED, NO_REPLY, OPEN, echo(A2)]);
    });

    test("domain_binding, wildcard_domain_allow, tcp_dns_transport_respects_ip_allow, domain_access_survives_default_deny", async () => {
      const r = await nprobe(n, a, [
        ["http", W1, 8080, "api.wild.test"],
        ["http", D1, 80, "allowed.test"],
        dns("allowed.test"),
        ["tls", D1, 443, "allowed.test"],
        tcp(D1, 5000),
        dns("other.test"),
        tcp(O1, 5000),
        ["http", O1, 80, "other.test"],
        dns("api.wild.test"),
        dns("deep.api.wild.test"),
        dns("wild.test"),
        ["http", W1, 8080, "api.wild.test"],
        ["http", W2, 8080, "deep.api.wild.test"],
        ["http", APEX, 8080, "wild.test"],
        ["http", APEX, 80, "wild.test"],
        tcp(VIA_TCP, 5000),
        dns("viatcp.test", true),
        tcp(VIA_TCP, 5000),
        dns("other.test", true),
        tcp(O1, 5000),
        dns("allowed.test", false, DNS),
        dns("allowed.test", true, DNS),
      ]);
      assert.deepEqual(r, [
        REFUSED, `ok ${D1} allowed.test`, D1, `open tcp ${D1}`, REFUSED, O1, REFUSED, RESET,
        W1, W2, APEX, `ok ${W1} api.wild.test`, `ok ${W2} deep.api.wild.test`, REFUSED, RESET,
        REFUSED, VIA_TCP, OPEN, O1, REFUSED, NO_REPLY, REFUSED,
      ]);
    });

    test("platform_guardrail_precedes_allow: rules allowing the node, link-local and operator-guarded ranges do not open them; the operator's exception does", async () => {
      const [gateway] = await nprobe(n, a, [["gateway"]]);
      const r = await nprobe(n, a, [tcp(gateway!, host.port), tcp("169.254.169.254"), tcp(G1, 5000), ["http", G1, 80, "allowed.test"], tcp(G2, 5000), ["http", G2, 80, "allowed.test"]]);
      assert.deepEqual(r, [REFUSED, REFUSED, REFUSED, REFUSED, OPEN, `ok ${G2} allowed.test`]);
    });

    test("rules_survive_restore: suspend → restore keeps the rules", async () => {
      const sus = await n.wait((await n.req("POST", `/v1/sandboxes/${a}/suspend`, { body: {} })).body.id);
      assert.equal(sus.state, "succeeded", JSON.stringify(sus.failure));
      const res = await n.wait((await n.req("POST", `/v1/sandboxes/${a}/restore`, { body: {} })).body.id);
      assert.equal(res.state, "succeeded", JSON.stringify(res.failure));
      const r = await nprobe(n, a, [tcp(A1, 5000), udp(A1), tcp(A2, 5000), tcp(B2, 5000), dns("allowed.test"), ["http", D1, 80, "allowed.test"], ["http", O1, 80, "other.test"], tcp(G1, 5000)]);
      assert.deepEqual(r, [OPEN, echo(A1), REFUSED, REFUSED, D1, `ok ${D1} allowed.test`, RESET, REFUSED]);
    });

    test("observe mode: nothing blocked, destinations (with resolved names) and would-be refusals listed; the proposed allow list applies as is; denied flows listed in enforce mode", async () => {
      const r = await nprobe(n, o, [tcp(A2, 5000), udp(B1), dns("allowed.test"), ["http", D1, 80, "allowed.test"], tcp(A1, 5000)]);
      assert.deepEqual(r, [OPEN, echo(B1), D1, `ok ${D1} allowed.test`, OPEN]);
      const rec = await n.req("GET", `/v1/sandboxes/${o}/network`);
      assert.equal(rec.status, 200, JSON.stringify(rec.body));
      const key = (d: { ip: string; protocol: string; port: number }) => `${d.ip} ${d.protocol} ${d.port}`;
      assert.equal(rec.body.mode, "observe");
      assert.deepEqual(rec.body.observed.map(key).sort(), [`${A1} tcp 5000`, `${A2} tcp 5000`, `${B1} udp 9999`, `${D1} tcp 80`]);
      assert.deepEqual(rec.body.observed.find((d: { port: number }) => d.port === 80).domains, ["allowed.test"]);
      assert.deepEqual(rec.body.denied.map(key).sort(), [`${A2} tcp 5000`, `${B1} udp 9999`, `${D1} tcp 80`], "the default deny would have refused all but A1");
      const proposed = rec.body.proposed_network;
      assert.deepEqual(proposed.rules.map((x: { target: string; protocol: string; ports: number[] }) => `${x.target} ${x.protocol} ${x.ports.join(",")}`), [`${A1} tcp 5000`, `${A2} tcp 5000`, `${B1} udp 9999`, "allowed.test tcp 80"]);
      const p = await n.create({ network: proposed });
      try {
        const after = await nprobe(n, p, [tcp(A2, 5000), udp(B1), tcp(A2, 8080), tcp(B1, 5000), ["http", D1, 80, "allowed.test"], ["http", D1, 80, "other.test"]]);
        assert.deepEqual(after, [OPEN, echo(B1), REFUSED, REFUSED, `ok ${D1} allowed.test`, RESET]);
      } finally {
        await n.req("DELETE", `/v1/sandboxes/${p}`).catch(() => undefined);
      }
      // Enforce mode: the refusals the earlier scenarios caused in B are listed, counted.
      const recB = await n.req("GET", `/v1/sandboxes/${b}/network`);
      assert.equal(recB.body.mode, "enforce");
      assert.deepEqual(recB.body.observed, []);
      const denied = new Map<string, number>(recB.body.denied.map((d: { ip: string; protocol: string; port: number; count: number }) => [key(d), d.count]));
      assert.ok((denied.get(`${B1} tcp 80`) ?? 0) >= 1 && (denied.get(`${A1} tcp 80`) ?? 0) >= 1, JSON.stringify(recB.body.denied));
      assert.equal(denied.has(`${A2} tcp 80`), false, "allowed flows are not listed as denied");
      // Another tenant cannot read it.
      const other = new NativeClient(stack.apiUrl, (await tenantWithToken(stack.apiUrl, stack.adminToken, "net-other", ALL)).token);
      assert.equal((await other.req("GET", `/v1/sandboxes/${b}/network`)).status, 404);
    });
  });
});
