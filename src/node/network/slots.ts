/**
 * Network slots: each sandbox gets its own network namespace (named after the node's
 * bridge and the sandbox id: namespaces are host-wide, and two agents on one host may hold
 * the same sandbox id at once, one releasing it while the other restores it), a veth pair
 * whose host end is an isolated port of the node bridge, an address from the node's slot
 * range, NAT egress and the guardrails of nft.ts. Slots are set up on
 * claim and torn down on release; an optional warm pool (all knobs default 0) keeps
 * pre-built slots. The number of slots is the node's advertised capacity.
 */
import { createSocket } from "node:dgram";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { addNetns, exec, writeIn } from "../../core/exec.ts";
import { settleAll } from "../../core/settle.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { conflictingRoutes, describeRoute, parseSlotRange, type HostRoute, type SlotRange } from "../../core/cidr.ts";
import type { ARecord } from "../dns/wire.ts";
import { NftBatch } from "./nft-batch.ts";
import { ENVD_PORT } from "../../contract/node-api.ts";
import { getLink, linkIndexOf, NETLINK_NETFILTER, NETLINK_ROUTE, portsRule, sendNetlink, slotInside, slotVeth } from "./netlink.ts";
import type { ForegroundActivity } from "../../core/foreground-activity.ts";
import { addSlotScript, baseRuleset, bindScript, DEFAULT_TABLE, deniedSet, observedSet, parseRecordSet, removeSlotScript, setPolicyScript, type SlotPolicy } from "./nft.ts";
import { domainMatches, domainRules, OPEN_POLICY, toEgressPolicy, type NetworkRecord, type ObservedDestination } from "../../contract/egress-policy.ts";

export interface Slot {
  /** Owner: a sandbox id, or `pool<index>` for a warm slot. */
  owner: string;
  index: number;
  address: string;
  gateway: string;
  prefix: number;
  netns: string;
  netnsPath: string;
  hostVeth: string;
  policy: SlotPolicy;
}

export interface NetworkSlotsOptions {
  cidr: string;
  maxSlots: number;
  /** Host names this node owns (several agents on one host, e.g. tests beside `space up`, must not sweep each other). */
  bridge?: string;
  nftTable?: string;
  /** Host veth names are `<prefix><slot index>`. */
  vethPrefix?: string;
  stateDir: string;
  pool: { target: number; retainReady: number; minReady: number };
  /** Extra always-denied destinations (e.g. the control plane, the machine network). */
  guardrails?: string[];
  /** Operator exceptions to the guardrails (then judged by each sandbox's policy). */
  guardrailExceptions?: string[];
  /** Shortest time a resolved domain address stays bound (answers with a smaller TTL). */
  minBindSec?: number;
  /** How long a slot released with `keep` stays set up for its owner's return (0: released at once). */
  keepMs?: number;
  /** What the warm pool's refill yields to (creates, adoptions): each slot it builds waits for a pause in them, at most POOL_YIELD_MAX_MS. */
  foreground?: Pick<ForegroundActivity, "untilQuiet">;
  logger: Logger;
}

export interface PoolHealth {
  ready: number;
  target: number;
  minReady: number;
  healthy: boolean;
}

/** The seam the sandbox manager uses (a fake in unit tests). */
export interface NetworkSlots {
  claim(sandboxId: string, policy: SlotPolicy, signal: AbortSignal): Promise<Slot>;
  /**
   * Two-phase claim: resolves as soon as the slot's network namespace exists (a container
   * may join it: nothing in it reaches anywhere yet); `configured` settles once the slot is
   * fully set up (veth, addresses, nft rules). On a rejected `configured` the slot is
   * already torn down and forgotten.
   */
  open(sandboxId: string, policy: SlotPolicy, signal: AbortSignal): Promise<{ slot: Slot; configured: Promise<void> }>;
  /**
   * Absent = ok. `keep`: the owner left but may come back here at once (a suspend, then a
   * connect): the slot stays set up for `keepMs`, then goes; an `open` of the owner
   * meanwhile takes it back, with the policy it asks for.
   */
  release(sandboxId: string, signal: AbortSignal, o?: { keep?: boolean }): Promise<void>;
  setPolicy(sandboxId: string, policy: SlotPolicy, signal: AbortSignal): Promise<void>;
  /** Destinations recorded for the sandbox (observe mode) and refused by its policy. */
  observed?(sandboxId: string, signal: AbortSignal): Promise<NetworkRecord>;
  get(sandboxId: string): Slot | undefined;
  inUse(): number;
  capacity(): number;
  poolHealth(): PoolHealth;
}

const T = 30_000;
/** Where `ip netns` keeps named network namespaces (and looks for them). */
const NETNS_DIR = "/run/netns";
const POOL = /^pool\d+$/;
/** The longest a warm slot's build waits for the node's creates to pause: under a steady stream the pool still refills, slowly. */
const POOL_YIELD_MAX_MS = 10_000;


async function ip(args: string[], signal: AbortSignal, input?: string): Promise<void> {
  await exec("ip", args, { timeoutMs: T, signal, input });
}
async function nft(script: string, signal: AbortSignal): Promise<void> {
  await exec("nft", ["-f", "-"], { timeoutMs: T, signal, input: script });
}

export class LinuxNetworkSlots implements NetworkSlots {
  readonly range: SlotRange;
  readonly bridge: string;
  readonly table: string;
  readonly vethPrefix: string;
  private readonly bridgeMacAddr: string;
  /** The alias every host veth of this node carries: its owner mark (the bridge name is unique per node). */
  private readonly linkAlias: string;
  private readonly o: NetworkSlotsOptions;
  private readonly slots = new Map<string, Slot>();
  private readonly usedIndexes = new Set<number>();
  private readonly pool: Slot[] = [];
  /** Scripts on the node's table (its slots' rules), batched while one runs. */
  private readonly rules = new NftBatch((script, signal) => nft(script, signal), T);
  private filling: Promise<void> | undefined;
  private bridgeMac = "";
  /** Policy generation: the conntrack mark of the flows a policy version accepted. */
  private generation = (Date.now() / 1000) >>> 0;
  private netnsDir: Promise<void> | undefined;
  private bridgeIndexOnce: Promise<number> | undefined;
  /** Names a sandbox resolved through the node resolver (re-bound when its policy changes). */
  private readonly resolvedNames = new Map<string, Map<string, { addresses: string[]; expires: number }>>();
  /** Slots released with `keep` (owner → the timer that releases them). */
  private readonly kept = new Map<string, NodeJS.Timeout>();
  /** Teardowns in flight (owner → teardown): an open of the owner waits, its namespace name is the same. */
  private readonly tearingDown = new Map<string, Promise<void>>();

  constructor(o: NetworkSlotsOptions) {
    this.o = o;
    this.range = parseSlotRange(o.cidr);
    this.bridge = o.bridge ?? "space0";
    this.table = o.nftTable ?? DEFAULT_TABLE;
    this.vethPrefix = o.vethPrefix ?? "vs";
    this.bridgeMacAddr = bridgeMac(this.bridge);
    this.linkAlias = `space-slot-of-${this.bridge}`;
    if (o.maxSlots > this.range.size) throw new SpaceError("invalid_argument", `SPACE_NODE_MAX_SLOTS=${o.maxSlots} does not fit in ${o.cidr} (${this.range.size} addresses)`);
  }

  capacity(): number {
    return this.o.maxSlots;
  }
  inUse(): number {
    return this.slots.size;
  }
  get(sandboxId: string): Slot | undefined {
    return this.slots.get(sandboxId);
  }
  poolHealth(): PoolHealth {
    const { target, minReady } = this.o.pool;
    return { ready: this.pool.length, target, minReady, healthy: this.pool.length >= minReady };
  }

  /**
   * Bridge, forwarding, nft table; then reconciles recorded slots with the kernel: slots
   * whose netns survived are kept (their sandboxes may still run), anything else named like
   * a slot is torn down. `keep` says which sandbox ids still own their slot.
   */
  async init(keep: (owner: string) => boolean, signal: AbortSignal): Promise<void> {
    // Another route into the range (another agent's bridge, a stale one, the machine's
    // network) would shadow or steal the slots' traffic: refuse before creating anything.
    const conflicts = conflictingRoutes(this.range.cidr, this.bridge, await hostRoutes(signal));
    if (conflicts.length) {
      throw new SpaceError(
        "failed_precondition",
        `slot range ${this.range.cidr} (SPACE_NODE_SLOT_CIDR) overlaps the route ${conflicts.map(describeRoute).join(", ")} on this host, which is not this node's bridge ${this.bridge}: choose a free range or remove that route`,
        { details: { slotCidr: this.range.cidr, routes: conflicts.map(describeRoute) } },
      );
    }
    const haveBridge = (await listLinks(signal)).includes(this.bridge);
    // A bridge another live agent serves (two agents given the same names) would have its
    // table rebuilt and its veths swept below: refuse while its resolver holds the gateway.
    if (haveBridge && (await portTaken(this.range.gateway, 53))) {
      throw new SpaceError(
        "failed_precondition",
        `bridge ${this.bridge} is in use: something on this host already listens on its gateway ${this.range.gateway}:53 (another node agent with the same SPACE_NODE_BRIDGE?); give each agent its own SPACE_NODE_BRIDGE, SPACE_NODE_NFT_TABLE, SPACE_NODE_VETH_PREFIX and SPACE_NODE_SLOT_CIDR`,
      );
    }
    await writeFile("/proc/sys/net/ipv4/ip_forward", "1\n");
    await mkdir(this.o.stateDir, { recursive: true });
    if (!haveBridge) {
      await ip(["-b", "-"], signal, `link add ${this.bridge} type bridge\naddr add ${this.range.gateway}/${this.range.prefix} dev ${this.bridge}\nlink set ${this.bridge} up\n`);
    } else {
      await exec("ip", ["addr", "replace", `${this.range.gateway}/${this.range.prefix}`, "dev", this.bridge], { timeoutMs: T, signal });
      await ip(["link", "set", this.bridge, "up"], signal);
    }
    // A bridge takes the lowest MAC of its ports unless one is set: pin it, so the static
    // gateway neighbour entries inside the slots stay right as ports come and go.
    await ip(["link", "set", this.bridge, "address", this.bridgeMacAddr], signal);
    this.bridgeMac = this.bridgeMacAddr;
    this.bridgeIndexOnce = undefined;
    // The table is rebuilt from the records: level-triggered, no stale rule survives a restart.
    await exec("nft", ["delete", "table", "inet", this.table], { timeoutMs: T, signal, allowFailure: true });
    await exec("nft", ["delete", "table", "bridge", this.table], { timeoutMs: T, signal, allowFailure: true });
    await nft(
      baseRuleset({
        table: this.table,
        bridge: this.bridge,
        cidr: this.range.cidr,
        gateway: this.range.gateway,
        vethPrefix: this.vethPrefix,
        guardrails: this.o.guardrails,
        guardrailExceptions: this.o.guardrailExceptions,
      }),
      signal,
    );

    const records = await this.readRecords();
    const liveNetns = new Set(await listNetns(signal));
    for (const s of records) {
      if (keep(s.owner) && liveNetns.has(s.netns)) {
        this.slots.set(s.owner, s);
        this.usedIndexes.add(s.index);
        await this.rules.apply(addSlotScript(this.table, s.owner, s.address, s.policy, this.nextGeneration()), signal);
      } else {
        await this.teardown(s, signal);
      }
    }
    // Orphaned namespaces are reclaimed through their records (written before any host
    // object exists); unrecorded namespaces may belong to another agent on this host.
    // Orphaned host veths (`vs<index>`) whose slot is gone, and only this node's: on its
    // bridge or carrying its alias. Another agent on this host may use the same prefix
    // with its own bridge; its links are never touched.
    for (const link of await listLinkDetails(signal)) {
      const m = new RegExp(`^${this.vethPrefix}(\\d+)$`).exec(link.ifname);
      if (!m || this.usedIndexes.has(Number(m[1]))) continue;
      if (link.master !== this.bridge && link.ifalias !== this.linkAlias) continue;
      await exec("ip", ["link", "delete", link.ifname], { timeoutMs: T, signal, allowFailure: true });
    }
    void this.fillPool();
  }

  async claim(sandboxId: string, policy: SlotPolicy, signal: AbortSignal): Promise<Slot> {
    const { slot, configured } = await this.open(sandboxId, policy, signal);
    await configured;
    return slot;
  }

  async open(sandboxId: string, policy: SlotPolicy, signal: AbortSignal): Promise<{ slot: Slot; configured: Promise<void> }> {
    await this.tearingDown.get(sandboxId);
    const existing = this.slots.get(sandboxId);
    if (existing) {
      if (!this.unkeep(sandboxId) || JSON.stringify(existing.policy) === JSON.stringify(policy)) return { slot: existing, configured: Promise.resolve() };
      // Taken back under another policy: as a failed set-up, a failure leaves nothing behind.
      const configured = this.setPolicy(sandboxId, policy, signal).catch(async (e: unknown) => {
        await this.release(sandboxId, AbortSignal.timeout(T)).catch(() => undefined);
        throw e;
      });
      configured.catch(() => undefined);
      return { slot: existing, configured };
    }
    const warm = this.pool.shift();
    if (warm) {
      const slot: Slot = { ...warm, owner: sandboxId, policy };
      await this.rules.apply(removeSlotScript(this.table, warm.owner, warm.address, warm.policy) + addSlotScript(this.table, sandboxId, slot.address, policy, this.nextGeneration()), signal);
      this.slots.set(sandboxId, slot);
      await rm(this.recordPath(warm.owner), { force: true });
      await this.writeRecord(slot);
      void this.fillPool();
      return { slot, configured: Promise.resolve() };
    }
    const slot = await this.createNetns(sandboxId, policy, signal);
    this.slots.set(sandboxId, slot);
    const configured = this.configure(slot, signal).catch((e: unknown) => {
      if (this.slots.get(sandboxId) === slot) this.slots.delete(sandboxId);
      throw e;
    });
    // The caller may fail before it awaits `configured` (its cleanup releases the slot).
    configured.catch(() => undefined);
    return { slot, configured };
  }

  /**
   * /run/netns as `ip netns add` leaves it, once: a mount point of its own and shared, so
   * unmounting a namespace's file there unmounts it in the mount namespaces made since.
   */
  private netnsDirReady(signal: AbortSignal): Promise<void> {
    return (this.netnsDir ??= (async () => {
      await mkdir(NETNS_DIR, { recursive: true });
      const shared = await exec("mount", ["--make-rshared", NETNS_DIR], { timeoutMs: T, signal, allowFailure: true });
      if (shared.exitCode === 0) return;
      await exec("mount", ["--rbind", NETNS_DIR, NETNS_DIR], { timeoutMs: T, signal });
      await exec("mount", ["--make-rshared", NETNS_DIR], { timeoutMs: T, signal });
    })().catch((e: unknown) => {
      this.netnsDir = undefined;
      throw e;
    }));
  }

  /** The network namespace of a slot's owner: this node's (its bridge), not another agent's on the host. */
  netnsOf(owner: string): string {
    return `${this.bridge}-${owner}`;
  }

  private allocIndex(): number {
    for (let i = 0; i < this.o.maxSlots; i++) {
      if (!this.usedIndexes.has(i)) {
        this.usedIndexes.add(i);
        return i;
      }
    }
    throw new SpaceError("resource_exhausted", `all ${this.o.maxSlots} network slots of this node are in use`);
  }

  private async build(owner: string, policy: SlotPolicy, signal: AbortSignal): Promise<Slot> {
    const slot = await this.createNetns(owner, policy, signal);
    await this.configure(slot, signal);
    return slot;
  }

  /** A slot's index, record and (empty) network namespace. */
  private async createNetns(owner: string, policy: SlotPolicy, signal: AbortSignal): Promise<Slot> {
    const index = this.allocIndex();
    const slot: Slot = {
      owner,
      index,
      address: this.range.address(index),
      gateway: this.range.gateway,
      prefix: this.range.prefix,
      netns: this.netnsOf(owner),
      netnsPath: join(NETNS_DIR, this.netnsOf(owner)),
      hostVeth: `${this.vethPrefix}${index}`,
      policy,
    };
    try {
      // Record first: a crash in the middle leaves a record the next init tears down.
      await this.writeRecord(slot);
      await this.netnsDirReady(signal);
      await addNetns(slot.netnsPath, { timeoutMs: T, signal });
      return slot;
    } catch (e) {
      await this.teardown(slot, AbortSignal.timeout(T)).catch(() => undefined);
      throw e;
    }
  }

  /**
   * Veth to the bridge, addresses and routes, the slot's nft rules; torn down on failure.
   * Three independent chains at once, each a process or two: the veth (host side, then the
   * namespace's side), the namespace's own settings, and the node's rules.
   */
  private async configure(slot: Slot, signal: AbortSignal): Promise<void> {
    try {
      await settleAll([this.veth(slot, signal), this.loopbackPorts(slot, signal), this.rules.apply(addSlotScript(this.table, slot.owner, slot.address, slot.policy, this.nextGeneration()), signal)]);
    } catch (e) {
      await this.teardown(slot, AbortSignal.timeout(T)).catch(() => undefined);
      throw e;
    }
  }

  private async veth(slot: Slot, signal: AbortSignal): Promise<void> {
    // A MAC derived from the slot index: the node's neighbour entry for a reused address
    // stays valid (a random MAC would leave it stale for up to a minute). Both sides are
    // netlink messages the spawn server sends (netlink.ts), no `ip` process. The node's mark
    // goes in the same send as the link (the kernel runs both before the send returns); a
    // refused mark leaves the veth to configure's teardown, which deletes it by name.
    const mac = slotMac(slot.index);
    const opts = { timeoutMs: T, signal };
    const bridgeIndex = await this.bridgeIndex(signal);
    await sendNetlink(NETLINK_ROUTE, slotVeth({ hostVeth: slot.hostVeth, alias: this.linkAlias, bridge: this.bridge, bridgeIndex, netnsPath: slot.netnsPath, address: slot.address, mac }), {}, opts);
    const inside = { net: slot.netnsPath };
    const eth0 = linkIndexOf(await sendNetlink(NETLINK_ROUTE, getLink("eth0"), inside, opts));
    await sendNetlink(NETLINK_ROUTE, slotInside({ eth0, mac, address: slot.address, prefix: slot.prefix, gateway: slot.gateway, gatewayMac: this.bridgeMac }), inside, opts);
  }

  /** The node's bridge's index, asked once (the bridge lives as long as the node). */
  private bridgeIndex(signal: AbortSignal): Promise<number> {
    return (this.bridgeIndexOnce ??= sendNetlink(NETLINK_ROUTE, getLink(this.bridge), {}, { timeoutMs: T, signal }).then(linkIndexOf).catch((e: unknown) => {
      this.bridgeIndexOnce = undefined;
      throw e;
    }));
  }

  async setPolicy(sandboxId: string, policy: SlotPolicy, signal: AbortSignal): Promise<void> {
    const s = this.slots.get(sandboxId);
    if (!s) throw new SpaceError("not_found", `sandbox ${sandboxId} has no network slot on this node`);
    await this.rules.apply(setPolicyScript(this.table, sandboxId, policy, s.policy, this.nextGeneration()), signal);
    s.policy = policy;
    await this.writeRecord(s);
    // Names resolved under the previous policy keep working under the new one while their TTL runs.
    const now = Date.now();
    for (const [name, r] of this.resolvedNames.get(sandboxId) ?? []) {
      if (r.expires > now) await this.bindName(s, name, r.addresses, (r.expires - now) / 1000, signal);
    }
  }

  private nextGeneration(): number {
    this.generation = (this.generation + 1) >>> 0 || 1;
    return this.generation;
  }

  /**
   * Public ports bound to 127.0.0.1 inside the sandbox: connections from the node (the
   * gateway address, i.e. the node-api proxy) to any port but envd's are redirected to the
   * sandbox's loopback, where a server bound to 0.0.0.0 answers as well. route_localnet is
   * set for `all` (the kernel ORs it with each device's), so neither this nor the rule (it
   * matches eth0 by name) waits for the veth.
   */
  private async loopbackPorts(slot: Slot, signal: AbortSignal): Promise<void> {
    // Only the network namespace is joined (`ip netns exec` also builds a mount namespace and
    // remounts /sys: several times slower); /proc/sys/net is per netns.
    await Promise.all([
      writeIn("/proc/sys/net/ipv4/conf/all/route_localnet", "1", { net: slot.netnsPath }, { timeoutMs: T, signal }),
      sendNetlink(NETLINK_NETFILTER, portsRule(slot.gateway, slot.address, ENVD_PORT), { net: slot.netnsPath }, { timeoutMs: T, signal }),
    ]);
  }

  /** The egress proxy's question: the current policy of the sandbox at `address`. */
  policyAt(address: string): SlotPolicy | undefined {
    for (const s of this.slots.values()) if (s.address === address) return s.policy;
    return undefined;
  }

  /**
   * What the sandbox's flows reached (every new flow in observe mode) and what its policy
   * refused, each destination with the names it resolved to that address.
   */
  async observed(sandboxId: string, signal: AbortSignal): Promise<NetworkRecord> {
    if (!this.slots.has(sandboxId)) throw new SpaceError("not_found", `sandbox ${sandboxId} has no network slot on this node`);
    const names = this.resolvedNames.get(sandboxId);
    const read = async (set: string): Promise<ObservedDestination[]> => {
      const r = await exec("nft", ["-j", "list", "set", "inet", this.table, set], { timeoutMs: T, signal });
      return parseRecordSet(r.stdout).map((d) => ({ ...d, domains: [...(names ?? [])].filter(([, b]) => b.addresses.includes(d.ip)).map(([n]) => n).sort() }));
    };
    return { observed: await read(observedSet(sandboxId)), denied: await read(deniedSet(sandboxId)) };
  }

  /** The node resolver's question: is this a sandbox of this node? */
  owns(address: string): boolean {
    for (const s of this.slots.values()) if (s.address === address) return true;
    return false;
  }

  /** The node resolver's answer for a sandbox: binds it to every domain rule the name matches. */
  async resolved(address: string, name: string, records: ARecord[]): Promise<void> {
    const s = [...this.slots.values()].find((x) => x.address === address);
    if (!s || !records.length) return;
    const ttl = Math.max(this.o.minBindSec ?? 5, Math.min(...records.map((r) => r.ttl)));
    const addresses = [...new Set(records.map((r) => r.address))];
    let names = this.resolvedNames.get(s.owner);
    if (!names) this.resolvedNames.set(s.owner, (names = new Map()));
    const now = Date.now();
    for (const [n, r] of names) if (r.expires <= now) names.delete(n);
    // Repeated lookups of a name still bound for more than half its TTL skip the nft call.
    const prev = names.get(name);
    if (prev && prev.expires - now > ttl * 500 && prev.addresses.length === addresses.length && addresses.every((a) => prev.addresses.includes(a))) return;
    if (names.size < 4096) names.set(name, { addresses, expires: now + ttl * 1000 });
    await this.bindName(s, name, addresses, ttl, AbortSignal.timeout(T));
  }

  private async bindName(s: Slot, name: string, addresses: string[], ttlSec: number, signal: AbortSignal): Promise<void> {
    const script = domainRules(s.policy)
      .filter(({ rule }) => domainMatches(rule.domain!, name))
      .map(({ index }) => bindScript(this.table, s.owner, index, addresses, ttlSec))
      .join("");
    if (script) await this.rules.apply(script, signal);
  }

  /** Takes a kept slot back from its timer; whether it was kept. */
  private unkeep(owner: string): boolean {
    const timer = this.kept.get(owner);
    if (!timer) return false;
    clearTimeout(timer);
    this.kept.delete(owner);
    return true;
  }

  async release(sandboxId: string, signal: AbortSignal, o: { keep?: boolean } = {}): Promise<void> {
    this.unkeep(sandboxId);
    const keepMs = this.o.keepMs ?? 0;
    if (o.keep && keepMs > 0 && this.slots.has(sandboxId)) {
      const timer = setTimeout(() => {
        this.kept.delete(sandboxId);
        this.release(sandboxId, AbortSignal.timeout(T)).catch((e: unknown) => this.o.logger.warn({ sandboxId, err: e }, "releasing a kept network slot failed"));
      }, keepMs);
      timer.unref();
      this.kept.set(sandboxId, timer);
      return;
    }
    const s = this.slots.get(sandboxId);
    if (!s) {
      // Not known in memory: still clear whatever a crash may have left under this name.
      await exec("ip", ["netns", "delete", this.netnsOf(sandboxId)], { timeoutMs: T, signal, allowFailure: true });
      await this.rules.applies(removeSlotScript(this.table, sandboxId, undefined), signal);
      await rm(this.recordPath(sandboxId), { force: true });
      return;
    }
    this.slots.delete(sandboxId);
    this.resolvedNames.delete(sandboxId);
    if (this.pool.length < this.o.pool.retainReady) {
      // Retained warm: back to the pool under a pool name, with a default (open) policy.
      const owner = `pool${s.index}`;
      const pooled: Slot = { ...s, owner, policy: OPEN_POLICY };
      await this.rules.apply(removeSlotScript(this.table, sandboxId, s.address, s.policy) + addSlotScript(this.table, owner, s.address, pooled.policy, this.nextGeneration()), signal);
      await rm(this.recordPath(sandboxId), { force: true });
      await this.writeRecord(pooled);
      this.pool.push(pooled);
      return;
    }
    const teardown = this.teardown(s, signal);
    this.tearingDown.set(sandboxId, teardown.catch(() => undefined));
    try {
      await teardown;
    } finally {
      this.tearingDown.delete(sandboxId);
    }
  }

  private async teardown(s: Slot, signal: AbortSignal): Promise<void> {
    // One `ip` and one `nft` process when everything is there (each process costs ~5-15 ms
    // on a kill's, stop's or suspend's path). `-force` goes on past a missing object.
    // Delete the host veth first: it takes its peer with it synchronously, while a netns
    // delete frees its devices asynchronously (a reused index would collide).
    await exec("ip", ["-force", "-batch", "-"], {
      timeoutMs: T,
      signal,
      allowFailure: true,
      input: `link delete ${s.hostVeth}\nnetns delete ${s.netns}\nneigh del ${s.address} dev ${this.bridge}\n`,
    });
    // An nft script is one transaction: any missing object fails all of it, so then each part alone.
    if (!(await this.rules.applies(removeSlotScript(this.table, s.owner, s.address, s.policy), signal))) {
      await this.rules.applies(removeSlotScript(this.table, s.owner, s.address), signal);
      await this.rules.applies(removeSlotScript(this.table, s.owner, undefined), signal);
      for (const line of removeSlotScript(this.table, s.owner, undefined, s.policy).split("\n").filter((l) => l.startsWith("delete set"))) {
        await this.rules.applies(`${line}\n`, signal);
      }
    }
    this.usedIndexes.delete(s.index);
    await rm(this.recordPath(s.owner), { force: true });
  }

  /** Builds warm slots up to the pool target (no-op at the default target 0). */
  fillPool(): Promise<void> {
    if (this.filling) return this.filling;
    this.filling = (async () => {
      try {
        while (this.pool.length < this.o.pool.target && this.slots.size + this.pool.length < this.o.maxSlots) {
          // Built between bursts: inside one, its processes (ip, nft) took the cores the burst's creates wait for.
          await this.o.foreground?.untilQuiet(POOL_YIELD_MAX_MS);
          const index = [...Array(this.o.maxSlots).keys()].find((i) => !this.usedIndexes.has(i));
          if (index === undefined) break;
          const s = await this.build(`pool${index}`, OPEN_POLICY, AbortSignal.timeout(T));
          this.pool.push(s);
        }
      } catch (e) {
        this.o.logger.warn({ err: e }, "warm network slot pool could not fill");
      } finally {
        this.filling = undefined;
      }
    })();
    return this.filling;
  }

  /**
   * Removes this node's host objects (every slot, the nft tables, the bridge): a node
   * that is retired, or a test node being cleaned up. Idempotent.
   */
  async destroy(signal: AbortSignal): Promise<void> {
    await this.drainPool(signal);
    for (const s of [...this.slots.values()]) await this.release(s.owner, signal);
    await exec("nft", ["delete", "table", "inet", this.table], { timeoutMs: T, signal, allowFailure: true });
    await exec("nft", ["delete", "table", "bridge", this.table], { timeoutMs: T, signal, allowFailure: true });
    await exec("ip", ["link", "delete", this.bridge], { timeoutMs: T, signal, allowFailure: true });
  }

  /** Tears down the warm pool and the kept slots (node shutdown). */
  async drainPool(signal: AbortSignal): Promise<void> {
    for (const owner of [...this.kept.keys()]) await this.release(owner, signal);
    await this.filling;
    while (this.pool.length) await this.teardown(this.pool.pop()!, signal);
  }

  private recordPath(owner: string): string {
    return join(this.o.stateDir, `${owner}.json`);
  }
  private async writeRecord(s: Slot): Promise<void> {
    await writeFile(this.recordPath(s.owner), JSON.stringify(s));
  }
  private async readRecords(): Promise<Slot[]> {
    const out: Slot[] = [];
    for (const f of await readdir(this.o.stateDir).catch(() => [] as string[])) {
      if (!f.endsWith(".json")) continue;
      const s = await readFile(join(this.o.stateDir, f), "utf8").then((t) => JSON.parse(t) as Slot).catch(() => undefined);
      if (!s) continue;
      try {
        s.policy = toEgressPolicy(s.policy);
      } catch {
        s.policy = OPEN_POLICY;
      }
      out.push(s);
    }
    return out;
  }

  /** Pool slots found at init are rebuilt fresh rather than trusted. */
  static isPoolOwner(owner: string): boolean {
    return POOL.test(owner);
  }
}

/** Whether a UDP socket is bound to address:port already (an address not on this host is free). */
function portTaken(address: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createSocket("udp4");
    sock.once("error", (e: NodeJS.ErrnoException) => {
      try {
        sock.close();
      } catch {
        /* never bound */
      }
      resolve(e.code === "EADDRINUSE");
    });
    sock.bind({ address, port, exclusive: true }, () => sock.close(() => resolve(false)));
  });
}

/** The IPv4 routes of the main table in this process's network namespace. */
export async function hostRoutes(signal: AbortSignal): Promise<HostRoute[]> {
  const r = await exec("ip", ["-j", "-4", "route", "show"], { timeoutMs: T, signal });
  const rows = JSON.parse(r.stdout.trim() || "[]") as Array<{ dst?: unknown; dev?: unknown }>;
  return rows
    .filter((x): x is { dst: string; dev?: unknown } => typeof x.dst === "string")
    .map((x) => ({ dst: x.dst, ...(typeof x.dev === "string" ? { dev: x.dev } : {}) }));
}

export async function listNetns(signal: AbortSignal): Promise<string[]> {
  const r = await exec("ip", ["netns", "list"], { timeoutMs: T, signal, allowFailure: true });
  return r.stdout
    .split("\n")
    .map((l) => l.split(" ")[0]!)
    .filter(Boolean);
}

/**
 * Interface names in this process's network namespace. Asked of `ip`, not read from
 * /sys/class/net: sysfs shows the namespace it was mounted in, so an agent started in its
 * own network namespace (a lab host) would see the machine's interfaces instead of its own.
 */
async function listLinks(signal: AbortSignal): Promise<string[]> {
  const r = await exec("ip", ["-o", "link", "show"], { timeoutMs: T, signal, allowFailure: true });
  return r.stdout
    .split("\n")
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
    .filter((n): n is string => !!n);
}

/** Links with the bridge they are attached to and their alias (`ip -j`: names with spaces or `@` parse safely). */
async function listLinkDetails(signal: AbortSignal): Promise<Array<{ ifname: string; master?: string; ifalias?: string }>> {
  const r = await exec("ip", ["-j", "link", "show"], { timeoutMs: T, signal, allowFailure: true });
  try {
    return (JSON.parse(r.stdout || "[]") as Array<{ ifname: string; master?: string; ifalias?: string }>).filter((l) => typeof l.ifname === "string");
  } catch {
    return [];
  }
}

/** Locally administered unicast MAC for slot `index` (02:53:50 = "SP"). */
export function slotMac(index: number): string {
  const b = [0x02, 0x53, 0x50, (index >> 16) & 255, (index >> 8) & 255, index & 255];
  return b.map((x) => x.toString(16).padStart(2, "0")).join(":");
}

/** A stable, locally administered MAC for a bridge (derived from its name). */
export function bridgeMac(name: string): string {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return ["02", "53", "42", ((h >>> 16) & 255).toString(16), ((h >>> 8) & 255).toString(16), (h & 255).toString(16)].map((x) => x.padStart(2, "0")).join(":");
}
