/**
 * Network test rig: a fake "internet" (a network namespace with 198.18.0.0/15 addresses,
 * routed from the host through a veth, running HTTP/TCP/UDP-echo/DNS servers — nothing
 * leaves the machine), the node's network slots in their own host scope, and the node
 * resolver forwarding to the fake DNS. Probes run inside slot namespaces as the guest would.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { exec } from "../../src/core/exec.ts";
import { newSandboxId } from "../../src/core/ids.ts";
import { createLogger } from "../../src/core/log.ts";
import { REPO_DIR } from "../../src/node/agent.ts";
import { NodeResolver } from "../../src/node/dns/resolver.ts";
import type { EgressPolicy } from "../../src/contract/egress-policy.ts";
import { EgressProxy, guardrailCheck } from "../../src/node/network/egress-proxy.ts";
import { LinuxNetworkSlots, type Slot } from "../../src/node/network/slots.ts";
import type { FakeInternetConfig } from "./fake-internet.ts";
import type { Check } from "./probe.ts";

export const SCOPE = { bridge: "spnt0", nftTable: "space_nettest", vethPrefix: "vn", cidr: "10.210.0.0/24" };
const UP_NS = "spnet-inet";
const UP_HOST_VETH = "spnuh0";

/** Metadata services the fake internet stands in for (169.254.169.254 stays unrouted: the machine may use its own). */
export const METADATA = { alibaba: "100.100.100.200" };

export const INET = {
  a1: "198.18.1.1",
  a2: "198.18.1.2",
  b1: "198.18.2.1",
  w1: "198.18.3.1",
  w2: "198.18.3.2",
  apex: "198.18.4.1",
  dns: "198.18.0.53",
};
export const NAMES: Record<string, string[]> = {
  "allowed.test": [INET.a1],
  "other.test": [INET.b1],
  "api.wild.test": [INET.w1],
  "deep.api.wild.test": [INET.w2],
  "wild.test": [INET.apex],
};

const T = 30_000;
const sh = (cmd: string, args: string[], input?: string) => exec(cmd, args, { timeoutMs: T, input });
const shOk = (cmd: string, args: string[]) => exec(cmd, args, { timeoutMs: T, allowFailure: true });

/** Starts `node --import tsx <script> <arg>` inside `ns`; resolves once it prints `ready`. */
export async function serveIn(ns: string, cfg: FakeInternetConfig): Promise<ChildProcess> {
  const child = spawn("ip", ["netns", "exec", ns, process.execPath, "--import", "tsx", join(REPO_DIR, "test/network/fake-internet.ts"), JSON.stringify(cfg)], {
    cwd: REPO_DIR,
    stdio: ["pipe", "pipe", "inherit"],
  });
  await new Promise<void>((res, rej) => {
    let out = "";
    const t = setTimeout(() => rej(new Error(`fake servers in ${ns} not ready`)), 20_000);
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("ready")) {
        clearTimeout(t);
        res();
      }
    });
    child.once("exit", (c) => (clearTimeout(t), rej(new Error(`fake servers in ${ns} exited ${c}`))));
  });
  return child;
}

export function stopServer(c: ChildProcess): Promise<void> {
  return new Promise((res) => {
    if (c.exitCode !== null) return res();
    c.once("exit", () => res());
    c.kill("SIGTERM");
  });
}

/** Runs probe checks inside a namespace (as the sandbox's guest would). */
export async function probe(ns: string, checks: Check[]): Promise<string[]> {
  const r = await exec("ip", ["netns", "exec", ns, process.execPath, "--import", "tsx", join(REPO_DIR, "test/network/probe.ts"), JSON.stringify(checks)], { timeoutMs: 60_000, cwd: REPO_DIR });
  return JSON.parse(r.stdout) as string[];
}

export interface Rig {
  slots: LinuxNetworkSlots;
  resolver: NodeResolver;
  proxy: EgressProxy;
  gateway: string;
  stateDir: string;
  claim(policy: EgressPolicy): Promise<Slot>;
  close(): Promise<void>;
}

export interface InternetSpec {
  /** Namespace and host-side veth names. */
  ns: string;
  hostVeth: string;
  /** The /30 link between host and namespace: host gets .1, the namespace .2 (e.g. "198.19.255.0"). */
  link: string;
  /** The prefix routed from the host into the namespace (within 198.18.0.0/15, never a real network). */
  route: string;
  /** Addresses served (HTTP/TCP/UDP echo); `dns` also answers `names`. */
  addresses: string[];
  /**
   * Cloud metadata-service addresses outside 198.18.0.0/15 the namespace serves too, each
   * routed from the host as a /32 while the rig runs: a guardrail missing one shows OPEN.
   */
  metadata?: string[];
  dns?: string;
  names?: Record<string, string[]>;
}

export interface Internet {
  close(): Promise<void>;
}

const linkAddr = (link: string, last: number) => link.replace(/\.\d+$/, `.${Number(link.split(".")[3]) + last}`);

async function teardownInternetOf(x: InternetSpec): Promise<void> {
  await shOk("ip", ["route", "del", x.route]);
  for (const m of x.metadata ?? []) await shOk("ip", ["route", "del", `${m}/32`, "dev", x.hostVeth]);
  await shOk("ip", ["link", "del", x.hostVeth]);
  await shOk("ip", ["netns", "del", x.ns]);
}

/**
 * A fake internet namespace routed from the host (so anything the host forwards, e.g. a
 * node's NATed sandbox traffic, reaches it): the host side of a veth /30, a route for
 * `route` via the namespace, the served addresses on its loopback, its default route back.
 */
export async function startInternet(x: InternetSpec): Promise<Internet> {
  if (!x.route.startsWith("198.18.") && !x.route.startsWith("198.19.")) throw new Error(`test internet ${x.route} must be within 198.18.0.0/15`);
  await teardownInternetOf(x);
  const [host, peer] = [linkAddr(x.link, 1), linkAddr(x.link, 2)];
  await sh("ip", ["netns", "add", x.ns]);
  await sh("ip", ["-b", "-"],
    `link add ${x.hostVeth} type veth peer name eth0 netns ${x.ns}\naddr add ${host}/30 dev ${x.hostVeth}\nlink set ${x.hostVeth} up\n`);
  await sh("ip", ["-n", x.ns, "-b", "-"],
    `link set lo up\nlink set eth0 up\naddr add ${peer}/30 dev eth0\n${[...x.addresses, ...(x.metadata ?? []), ...(x.dns ? [x.dns] : [])].map((a) => `addr add ${a}/32 dev lo\n`).join("")}route add default via ${host}\n`);
  // The test internet is routed to the namespace (more specific than the default route).
  await sh("ip", ["route", "replace", x.route, "via", peer, "dev", x.hostVeth]);
  for (const m of x.metadata ?? []) await sh("ip", ["route", "replace", `${m}/32`, "via", peer, "dev", x.hostVeth]);
  const route = await sh("ip", ["route", "get", x.addresses[0]!]);
  if (!route.stdout.includes(x.hostVeth)) throw new Error(`test internet is not routed locally: ${route.stdout}`);
  const srv = await serveIn(x.ns, { addresses: [...x.addresses, ...(x.metadata ?? [])], dns: x.dns, names: x.names, ttl: 60 }).catch(async (e: unknown) => {
    await teardownInternetOf(x);
    throw e;
  });
  return {
    async close() {
      await stopServer(srv);
      await teardownInternetOf(x);
    },
  };
}

const RIG_INTERNET: InternetSpec = {
  ns: UP_NS,
  hostVeth: UP_HOST_VETH,
  link: "198.19.255.0",
  route: "198.18.0.0/15",
  addresses: [INET.a1, INET.a2, INET.b1, INET.w1, INET.w2, INET.apex],
  metadata: [METADATA.alibaba],
  dns: INET.dns,
  names: NAMES,
};

export async function startRig(o: { guardrails?: string[]; guardrailExceptions?: string[]; stateDir?: string } = {}): Promise<Rig> {
  const inet = await startInternet(RIG_INTERNET);

  const stateDir = o.stateDir ?? (await mkdtemp(join(tmpdir(), "space-net-test-")));
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? "warn", "net-test");
  const slots = new LinuxNetworkSlots({
    cidr: SCOPE.cidr,
    maxSlots: 64,
    stateDir,
    bridge: SCOPE.bridge,
    nftTable: SCOPE.nftTable,
    vethPrefix: SCOPE.vethPrefix,
    pool: { target: 0, retainReady: 0, minReady: 0 },
    guardrails: o.guardrails,
    guardrailExceptions: o.guardrailExceptions,
    logger,
  });
  await slots.init(() => false, AbortSignal.timeout(T));
  const resolver = new NodeResolver({ listen: slots.range.gateway, upstream: { host: INET.dns, port: 53 }, binder: slots, logger });
  await resolver.start();
  const proxy = new EgressProxy({
    listen: slots.range.gateway,
    policyOf: (a) => slots.policyAt(a),
    guarded: guardrailCheck({ slotCidr: slots.range.cidr, guardrails: o.guardrails, exceptions: o.guardrailExceptions }),
    logger,
  });
  await proxy.start();
  const owned: string[] = [];
  return {
    slots,
    resolver,
    proxy,
    stateDir,
    gateway: slots.range.gateway,
    async claim(policy) {
      const id = newSandboxId();
      owned.push(id);
      return slots.claim(id, policy, AbortSignal.timeout(T));
    },
    async close() {
      await resolver.stop();
      await proxy.stop();
      for (const id of owned) await slots.release(id, AbortSignal.timeout(T)).catch(() => undefined);
      await inet.close();
      await shOk("nft", ["delete", "table", "inet", SCOPE.nftTable]);
      await shOk("nft", ["delete", "table", "bridge", SCOPE.nftTable]);
      await shOk("ip", ["link", "del", SCOPE.bridge]);
      if (!o.stateDir) await rm(stateDir, { recursive: true, force: true });
    },
  };
}

export const tcpTo = (host: string, port = 80): Check => ({ kind: "tcp", host, port });
export const udpTo = (host: string, port = 9999): Check => ({ kind: "udp", host, port });
export const httpTo = (host: string, hostHeader: string, port = 80): Check => ({ kind: "http", host, port, hostHeader });
export const tlsTo = (host: string, sni: string, port = 443): Check => ({ kind: "tls", host, port, sni });
export const dnsOf = (name: string, server: string, tcp = false): Check => ({ kind: "dns", name, server, tcp });
