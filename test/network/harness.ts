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
import type { EgressPolicy } from "../../src/node/network/policy.ts";
import { LinuxNetworkSlots, type Slot } from "../../src/node/network/slots.ts";
import type { FakeInternetConfig } from "./fake-internet.ts";
import type { Check } from "./probe.ts";

export const SCOPE = { bridge: "spnt0", nftTable: "space_nettest", vethPrefix: "vn", cidr: "10.210.0.0/24" };
const UP_NS = "spnet-inet";
const UP_HOST_VETH = "spnuh0";

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
  gateway: string;
  stateDir: string;
  claim(policy: EgressPolicy): Promise<Slot>;
  close(): Promise<void>;
}

async function teardownInternet(): Promise<void> {
  await shOk("ip", ["route", "del", "198.18.0.0/15"]);
  await shOk("ip", ["link", "del", UP_HOST_VETH]);
  await shOk("ip", ["netns", "del", UP_NS]);
}

export async function startRig(o: { guardrails?: string[]; guardrailExceptions?: string[]; stateDir?: string } = {}): Promise<Rig> {
  await teardownInternet();
  await sh("ip", ["netns", "add", UP_NS]);
  await sh("ip", ["-b", "-"],
    `link add ${UP_HOST_VETH} type veth peer name eth0 netns ${UP_NS}\naddr add 198.19.255.1/30 dev ${UP_HOST_VETH}\nlink set ${UP_HOST_VETH} up\n`);
  await sh("ip", ["-n", UP_NS, "-b", "-"],
    `link set lo up\nlink set eth0 up\naddr add 198.19.255.2/30 dev eth0\n${Object.values(INET).map((a) => `addr add ${a}/32 dev lo\n`).join("")}route add default via 198.19.255.1\n`);
  // The whole test internet is routed to the namespace (more specific than the default route).
  await sh("ip", ["route", "replace", "198.18.0.0/15", "via", "198.19.255.2", "dev", UP_HOST_VETH]);
  const route = await sh("ip", ["route", "get", INET.a1]);
  if (!route.stdout.includes(UP_HOST_VETH)) throw new Error(`test internet is not routed locally: ${route.stdout}`);
  const inet = await serveIn(UP_NS, { addresses: [INET.a1, INET.a2, INET.b1, INET.w1, INET.w2, INET.apex], dns: INET.dns, names: NAMES, ttl: 60 });

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
  const owned: string[] = [];
  return {
    slots,
    resolver,
    stateDir,
    gateway: slots.range.gateway,
    async claim(policy) {
      const id = newSandboxId();
      owned.push(id);
      return slots.claim(id, policy, AbortSignal.timeout(T));
    },
    async close() {
      await resolver.stop();
      for (const id of owned) await slots.release(id, AbortSignal.timeout(T)).catch(() => undefined);
      await stopServer(inet);
      await teardownInternet();
      await shOk("nft", ["delete", "table", "inet", SCOPE.nftTable]);
      await shOk("nft", ["delete", "table", "bridge", SCOPE.nftTable]);
      await shOk("ip", ["link", "del", SCOPE.bridge]);
      if (!o.stateDir) await rm(stateDir, { recursive: true, force: true });
    },
  };
}

export const tcpTo = (host: string, port = 80): Check => ({ kind: "tcp", host, port });
export const udpTo = (host: string, port = 9999): Check => ({ kind: "udp", host, port });
export const dnsOf = (name: string, server: string, tcp = false): Check => ({ kind: "dns", name, server, tcp });
