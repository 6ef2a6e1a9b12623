/**
 * Network policy end to end: the real stack (`space up`), driven by the unmodified e2b
 * SDK, against a fake "internet" this suite builds on the machine (a network namespace
 * with 198.18.200.x addresses serving HTTP/TCP/UDP echo, routed from the host through a
 * veth; sandbox traffic reaches it through the node's NAT and the host's routing — nothing
 * leaves the machine). The guest probes with curl from inside the sandbox. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError, type ConnectionOpts, type SandboxOpts } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";
import { startInternet, type Internet } from "../network/harness.ts";
import { ALL, NativeClient, nativeSkipReason, tenantWithToken } from "./native-client.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, nftables)" : false;

/** The fake internet of this suite (never a real network: 198.18.0.0/15 is for benchmarking). */
const A1 = "198.18.200.1";
const A2 = "198.18.200.2";
const B1 = "198.18.201.1";

type Reach = "ok" | "refused" | "timeout" | `curl ${number}`;

/** From inside the sandbox: HTTP GET to `ip:port` with curl (a 3 s limit). */
async function reach(sb: Sandbox, ip: string, port = 80): Promise<Reach> {
  const r = await sb.commands.run(`curl -sS -m 3 http://${ip}:${port}/; echo " rc=$?"`);
  const rc = Number(/rc=(\d+)\s*$/.exec(r.stdout)?.[1] ?? -1);
  if (rc === 0) {
    assert.match(r.stdout, new RegExp(`^ok ${ip.replace(/\./g, "\\.")} `), r.stdout);
    return "ok";
  }
  if (rc === 7) return "refused";
  if (rc === 28) return "timeout";
  return `curl ${rc}`;
}

/** UDP echo from inside the sandbox (python3 is in `base`). */
async function udpEcho(sb: Sandbox, ip: string): Promise<string> {
  const py = `import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(2)
try:
  s.sendto(b"ping",("${ip}",9999));print(s.recv(512).decode())
except Exception as e:
  print(type(e).__name__)`;
  const r = await sb.commands.run(`python3 -c '${py}'`);
  return r.stdout.trim();
}

describe("network policy with the e2b SDK", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let inet: Internet;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];
  const create = async (o: Partial<SandboxOpts> = {}) => {
    const sb = await Sandbox.create("base", { ...opts, timeoutMs: 600_000, ...o });
    created.push(sb);
    return sb;
  };

  before(async () => {
    inet = await startInternet({ ns: "spe2e-inet", hostVeth: "spe2euh0", link: "198.19.254.0", route: "198.18.200.0/23", addresses: [A1, A2, B1] });
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
    await inet?.close();
  });

  test("internet_access_allowed: the default reaches the upstream (TCP and UDP), immediately after create", async () => {
    const sb = await create();
    assert.equal(await reach(sb, A1), "ok");
    assert.equal(await udpEcho(sb, A1), `echo ${A1} ping`);
    assert.equal(await reach(sb, B1, 8080), "ok");
  });

  test("internet_access_denied: allowInternetAccess:false refuses TCP and UDP", async () => {
    const sb = await create({ allowInternetAccess: false });
    assert.equal(await reach(sb, A1), "refused");
    assert.equal(await reach(sb, B1, 5000), "refused");
    assert.notEqual(await udpEcho(sb, A1), `echo ${A1} ping`);
    assert.equal((await sb.getInfo()).allowInternetAccess, false);
  });

  test("cidr/ip allow exception: denyOut 0.0.0.0/0 + allowOut one IP → only that IP", async () => {
    const sb = await create({ network: { denyOut: ["0.0.0.0/0"], allowOut: [A1] } });
    assert.equal(await reach(sb, A1), "ok");
    assert.equal(await reach(sb, A1, 8080), "ok");
    assert.equal(await udpEcho(sb, A1), `echo ${A1} ping`);
    assert.equal(await reach(sb, A2), "refused");
    assert.equal(await reach(sb, B1), "refused");
    const info = await sb.getInfo();
    assert.deepEqual(info.network?.denyOut, ["0.0.0.0/0"]);
    assert.deepEqual(info.network?.allowOut, [A1]);
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

  test("updateNetwork (PUT /sandboxes/{id}/network) replaces the policy of a live sandbox within a second", async () => {
    const sb = await create();
    assert.equal(await reach(sb, A2), "ok");
    await sb.updateNetwork({ denyOut: ["0.0.0.0/0"], allowOut: [A1] });
    const t0 = Date.now();
    assert.equal(await reach(sb, A2), "refused");
    assert.ok(Date.now() - t0 < 4000);
    assert.equal(await reach(sb, A1), "ok");
    assert.deepEqual((await sb.getInfo()).network?.allowOut, [A1]);
    // Replace, not merge: an update without fields opens everything again.
    await sb.updateNetwork({});
    assert.equal(await reach(sb, A2), "ok");
    // allowInternetAccess:false on the update ≡ denyOut 0.0.0.0/0.
    await sb.updateNetwork({ allowInternetAccess: false });
    assert.equal(await reach(sb, A1), "refused");
    // The same over the wire with the API key; a domain in denyOut is a 400 there too.
    const put = (body: unknown) =>
      fetch(`${stack.apiUrl}/sandboxes/${sb.sandboxId}/network`, {
        method: "PUT",
        headers: { "x-api-key": stack.apiKey, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    assert.equal((await put({ denyOut: ["example.test"] })).status, 400);
    assert.equal(await reach(sb, A1), "refused", "a refused update leaves the policy as it was");
    assert.equal((await put({ allowOut: [B1], denyOut: ["0.0.0.0/0"] })).status, 204);
    assert.equal(await reach(sb, B1), "ok");
    assert.equal(await reach(sb, A1), "refused");
  });

  test("rules_survive_restore: pause → connect keeps the policy (create-time and updated)", async () => {
    const sb = await create({ network: { denyOut: ["0.0.0.0/0"], allowOut: [A1] } });
    assert.equal(await reach(sb, A2), "refused");
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.equal(await reach(back, A1), "ok");
    assert.equal(await reach(back, A2), "refused");
    // An update made on the live sandbox survives the next restore too.
    await back.updateNetwork({ denyOut: ["0.0.0.0/0"], allowOut: [A2] });
    assert.equal(await back.pause(), true);
    const again = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.equal(await reach(again, A2), "ok");
    assert.equal(await reach(again, A1), "refused");
  });

  test("sandbox_network_isolation_holds: sandboxes cannot reach each other, even allowed everything", async () => {
    const [a, b] = await Promise.all([create({ network: { allowOut: ["0.0.0.0/0"] } }), create()]);
    await b.commands.run("python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1", { background: true });
    const ipOf = async (sb: Sandbox) => (await sb.commands.run("ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1")).stdout.trim();
    const ipB = await ipOf(b);
    assert.match(ipB, /^\d+\.\d+\.\d+\.\d+$/);
    const code = async () => (await b.commands.run("curl -s -m 3 -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/ || true")).stdout;
    await waitFor(async () => (await code()) === "200", "b serving on its own loopback", 10_000, 200);
    const fromA = await reach(a, ipB, 8000);
    assert.notEqual(fromA, "ok");
    const envdFromA = await reach(a, ipB, 49983);
    assert.notEqual(envdFromA, "ok");
    // And a still reaches the upstream (the isolation is not a blanket block).
    assert.equal(await reach(a, A1), "ok");
  });

  test("Native /v1 network.rules: deny precedes allow, protocol and ports, default deny", async (t) => {
    const notMounted = await nativeSkipReason(stack.apiUrl);
    if (notMounted) return t.skip(notMounted);
    const { token } = await tenantWithToken(stack.apiUrl, stack.adminToken, "net-native", ALL);
    const n = new NativeClient(stack.apiUrl, token);
    const bad = await n.req("POST", "/v1/sandboxes", { body: { template: "base", network: { rules: [{ action: "allow", target: "not a target" }] } } });
    assert.equal(bad.status, 400, JSON.stringify(bad.body));
    const id = await n.create({
      network: {
        default: "deny",
        rules: [
          { action: "allow", target: "198.18.200.0/24", protocol: "tcp", ports: [80] },
          { action: "deny", target: A2 },
        ],
      },
    });
    try {
      const curl = async (ip: string, port: number) => {
        const r = await n.run(id, { cmd: "/bin/sh", args: ["-c", `curl -sS -m 3 -o /dev/null http://${ip}:${port}/; echo $?`] });
        return r.stdout.trim();
      };
      assert.equal(await curl(A1, 80), "0", "allowed: tcp 80 in the CIDR");
      assert.equal(await curl(A2, 80), "7", "deny precedes allow");
      assert.equal(await curl(A1, 8080), "7", "other ports fall to the default deny");
      assert.equal(await curl(B1, 80), "7", "outside the CIDR: default deny");
    } finally {
      await n.req("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined);
    }
  });
});
