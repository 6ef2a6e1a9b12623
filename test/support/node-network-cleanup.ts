/**
 * Host network objects of the node agents that tests and benches start. A node agent
 * keeps its bridge, nft tables and slot namespaces on a normal stop (the next start
 * reconciles them) and cannot remove anything when it is killed, so harnesses remove them
 * here on close, and pick slot ranges no route on the machine overlaps: a stale bridge's
 * route left by a killed run can then never capture a later node's slot traffic.
 * Synchronous, so it also runs from a signal handler.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { conflictingRoutes, intToIp, ipToInt, type HostRoute } from "../../src/core/cidr.ts";

export interface NodeNetwork {
  bridge: string;
  nftTable: string;
  /** Host veths are `<vethPrefix><slot index>`. */
  vethPrefix?: string;
  /** The node's slot records (`<node dir>/slots`): each names a slot netns and host veth. */
  slotsDir?: string;
  /** The network namespace the agent ran in (lab nodes); default: this process's. */
  netns?: string;
}

function run(argv: string[]): { ok: boolean; stdout: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8" });
  return { ok: r.status === 0, stdout: r.stdout ?? "" };
}

const inNetns = (netns: string | undefined, argv: string[]) => (netns ? ["nsenter", `--net=/run/netns/${netns}`, ...argv] : argv);

/** IPv4 routes of the main table (in `netns` when given). */
export function hostRoutesSync(netns?: string): HostRoute[] {
  const r = run(inNetns(netns, ["ip", "-j", "-4", "route", "show"]));
  const rows = JSON.parse(r.stdout.trim() || "[]") as Array<{ dst?: unknown; dev?: unknown }>;
  return rows.flatMap((x) => (typeof x.dst === "string" ? [{ dst: x.dst, ...(typeof x.dev === "string" ? { dev: x.dev } : {}) }] : []));
}

/**
 * Harness slot ranges come from 10.220.0.0 - 10.249.255.255: clear of `space up`'s
 * default 10.200.0.0/16 and of the fixed ranges some suites use (10.200-10.210, 10.25x).
 */
const POOL_START = ipToInt("10.220.0.0");
const POOL_SIZE = 30 * 65536;

/**
 * A slot range of `/prefix` that no route on this machine overlaps, its first candidate
 * derived from `seed` (the node's dir: a restart gets the same range). A range a route
 * through `bridge` already holds (this node's own bridge, left from before a restart) is
 * kept unless another route overlaps it; a range another bridge holds, stale or live, is
 * skipped.
 */
export function pickSlotRange(seed: string, bridge: string, prefix = 24, routes: HostRoute[] = hostRoutesSync()): string {
  const own = routes.find((r) => r.dev === bridge && r.dst.endsWith(`/${prefix}`) && !conflictingRoutes(r.dst, bridge, routes).length);
  if (own) return own.dst;
  const size = 2 ** (32 - prefix);
  const count = Math.floor(POOL_SIZE / size);
  const start = createHash("sha256").update(seed).digest().readUInt32BE(0) % count;
  for (let i = 0; i < count; i++) {
    const cidr = `${intToIp(POOL_START + ((start + i) % count) * size)}/${prefix}`;
    if (!conflictingRoutes(cidr, bridge, routes).length) return cidr;
  }
  throw new Error(`no /${prefix} in 10.220.0.0-10.249.255.255 is free of routes on this machine`);
}

function links(netns?: string): string[] {
  return run(inNetns(netns, ["ip", "-o", "link", "show"]))
    .stdout.split("\n")
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
    .filter((n): n is string => !!n);
}

function netnsNames(): Set<string> {
  return new Set(run(["ip", "netns", "list"]).stdout.split("\n").map((l) => l.split(" ")[0]!).filter(Boolean));
}

/**
 * Removes a node's slot namespaces and host veths (from its records, then by name), its
 * nft tables (inet and bridge) and its bridge. Idempotent; returns what it removed. Call
 * once the agent has stopped or died: a live agent would recreate what it misses.
 */
export function removeNodeNetwork(n: NodeNetwork): string[] {
  const removed: string[] = [];
  const del = (what: string, argv: string[]) => {
    if (run(argv).ok) removed.push(what);
  };
  const namespaces = netnsNames();
  let present = links(n.netns);
  const records = n.slotsDir && existsSync(n.slotsDir) ? readdirSync(n.slotsDir, { withFileTypes: true }).filter((f) => f.isFile() && f.name.endsWith(".json")) : [];
  for (const f of records) {
    const path = join(n.slotsDir!, f.name);
    const rec = (() => {
      try {
        return JSON.parse(readFileSync(path, "utf8")) as { netns?: unknown; hostVeth?: unknown };
      } catch {
        return {};
      }
    })();
    // The host veth first: it takes its peer with it at once (a netns frees its devices later).
    if (typeof rec.hostVeth === "string" && present.includes(rec.hostVeth)) del(`veth ${rec.hostVeth}`, inNetns(n.netns, ["ip", "link", "delete", rec.hostVeth]));
    if (typeof rec.netns === "string" && namespaces.has(rec.netns)) del(`netns ${rec.netns}`, ["ip", "netns", "delete", rec.netns]);
    rmSync(path, { force: true });
  }
  present = links(n.netns);
  if (n.vethPrefix) {
    const veth = new RegExp(`^${n.vethPrefix}\\d+$`);
    for (const l of present.filter((x) => veth.test(x))) del(`veth ${l}`, inNetns(n.netns, ["ip", "link", "delete", l]));
  }
  for (const family of ["inet", "bridge"]) {
    if (run(inNetns(n.netns, ["nft", "list", "table", family, n.nftTable])).ok) del(`nft table ${family} ${n.nftTable}`, inNetns(n.netns, ["nft", "delete", "table", family, n.nftTable]));
  }
  if (present.includes(n.bridge)) del(`bridge ${n.bridge}`, inNetns(n.netns, ["ip", "link", "delete", n.bridge]));
  return removed;
}

/**
 * A data dir holding this file (the pid of the harness process) belongs to that process
 * while it lives: scripts/clean-leftovers.sh leaves its mounts alone.
 */
export const OWNER_PID_FILE = ".space-harness-pid";

/**
 * Deletes (kills) every container of a node's runtime state dir: the sandboxes of a node
 * that was killed, or stopped without releasing them, would outlive the harness and hold
 * their netns and the node's cache mount. Returns the ids.
 */
export function removeNodeContainers(runtime: string, stateDir: string): string[] {
  if (runtime === "process" || !existsSync(stateDir)) return [];
  const ids = run([runtime, "--root", stateDir, "list", "-q"]).stdout.split("\n").filter(Boolean);
  return ids.filter((id) => run([runtime, "--root", stateDir, "delete", "--force", id]).ok);
}

const onSignal = new Set<() => void>();
let installed = false;

/**
 * Runs `cleanup` if this process is interrupted (SIGINT, SIGTERM) before the returned
 * function is called: a harness killed mid-test still removes its host objects. SIGKILL
 * cannot be caught: scripts/clean-leftovers.sh removes those, and pickSlotRange steps
 * around their routes.
 */
export function cleanupOnSignal(cleanup: () => void): () => void {
  if (!installed) {
    installed = true;
    for (const sig of ["SIGINT", "SIGTERM"] as const) {
      process.once(sig, () => {
        for (const c of onSignal) {
          try {
            c();
          } catch {
            /* best effort: the next cleanup still runs */
          }
        }
        process.kill(process.pid, sig);
      });
    }
  }
  onSignal.add(cleanup);
  return () => onSignal.delete(cleanup);
}
