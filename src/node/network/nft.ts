/**
 * The node's nftables rules (table `inet space`, plus `bridge space` for L2), as nft
 * scripts (pure, unit-tested).
 * Guardrails, always on and before any sandbox policy: sandboxes cannot reach each other
 * (also enforced at L2 by bridge port isolation), the node itself (any of its addresses,
 * loopback services included) except its DNS resolver, metadata addresses (METADATA_GUARDRAILS),
 * operator-listed addresses (`guardrails`, e.g. the control plane), or DNS servers other
 * than the node resolver; IPv6, VLAN-tagged and other non-IP/ARP frames from sandboxes are
 * dropped; egress is NATed. The operator may list `guardrailExceptions` (these then go
 * through the sandbox's policy like any destination).
 * Each slot has its own chain `sb_<id>` reached through the `egress` verdict map: its
 * egress policy (policy.ts) as first-match rules; domain rules match the sets
 * `sb_<id>_<rule index>` the node resolver fills with answers for their TTL. Accepted
 * flows carry the policy generation in their conntrack mark, so a policy update
 * re-judges flows opened under the previous one (and an expiring domain binding does
 * not cut a flow it allowed).
 * A slot whose policy has domain rules for TCP 80/443 has those ports redirected (nat
 * chain `np_<id>`, reached through the `proxied` map) to the node's egress proxy on the
 * gateway (egress-proxy.ts), which judges the HTTP Host / TLS SNI; guarded destinations
 * are never redirected, so the forward guardrails refuse them first.
 */
import { domainRules, NAMED_PORTS, proxiesNamedPorts, type EgressPolicy, type EgressRule } from "../../contract/egress-policy.ts";

export const DEFAULT_TABLE = "space";
/**
 * Port of the node's egress proxy on the gateway address. Fixed: each node listens on its
 * own bridge address, so nodes sharing a host do not collide, and the slot scripts stay
 * independent of the running process.
 */
export const EGRESS_PROXY_PORT = 15080;

/**
 * Metadata services, always guarded (before the operator's list; its exceptions can open
 * one): link-local 169.254.0.0/16 (AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle at
 * 169.254.169.254, ECS task metadata at 169.254.170.2) and Alibaba Cloud's 100.100.100.200.
 * IPv6 ones (AWS fd00:ec2::254) are covered by dropping every IPv6 frame of a sandbox.
 */
export const METADATA_GUARDRAILS = ["169.254.0.0/16", "100.100.100.200/32"] as const;

export interface BaseRulesInput {
  table: string;
  bridge: string;
  cidr: string;
  /** The bridge address: the node resolver listens there on port 53. */
  gateway?: string;
  /** Host veth name prefix (L2 filter of guest frames). */
  vethPrefix?: string;
  /** Extra always-denied destinations (the control plane, the machine network). */
  guardrails?: string[];
  /** Operator exceptions to the guardrails (still subject to the sandbox's policy). */
  guardrailExceptions?: string[];
}

const set = (xs: string[]) => `{ ${xs.join(", ")} }`;

/**
 * Refusal of `match`: a TCP reset for TCP (ICMP errors the node sends are rate limited
 * per destination, so a burst of refusals would otherwise look like timeouts), an ICMP
 * port unreachable for the rest.
 */
const reject = (match: string, counter = false): string[] => {
  const c = counter ? "counter " : "";
  return [`${match}meta l4proto tcp ${c}reject with tcp reset`, `${match}${c}reject`];
};

export function baseRuleset(i: BaseRulesInput): string {
  const br = `iifname "${i.bridge}"`;
  const exc = i.guardrailExceptions?.length ? set(i.guardrailExceptions) : undefined;
  const lines = [
    `${br} oifname "${i.bridge}" drop`,
    `${br} ip saddr != ${i.cidr} drop`,
    `${br} meta nfproto ipv6 drop`,
    ...(exc ? [`${br} ip daddr ${exc} ip saddr vmap @egress`] : []),
    ...reject(`${br} ip daddr ${set([...METADATA_GUARDRAILS])} `),
    ...reject(`${br} ip daddr ${i.cidr} `),
    ...(i.guardrails?.length ? reject(`${br} ip daddr ${set(i.guardrails)} `) : []),
    // DNS goes through the node resolver only (it binds names to the allow sets).
    ...reject(`${br} meta l4proto { tcp, udp } th dport 53 `),
    `${br} ip saddr vmap @egress`,
    `oifname "${i.bridge}" ip daddr ${i.cidr} ct state established,related accept`,
    `oifname "${i.bridge}" ip daddr ${i.cidr} drop`,
  ];
  const input = [
    `${br} ct state established,related accept`,
    ...(i.gateway ? [`${br} ip daddr ${i.gateway} meta l4proto { tcp, udp } th dport 53 accept`] : []),
    // Only connections the prerouting chain redirected reach the egress proxy.
    ...(i.gateway ? [`${br} ip daddr ${i.gateway} tcp dport ${EGRESS_PROXY_PORT} ct status dnat accept`] : []),
    ...(exc ? [`${br} ip daddr ${exc} ip saddr vmap @egress`] : []),
    ...reject(`${br} meta l4proto { tcp, udp } `),
    `${br} drop`,
  ];
  // Guarded destinations are never redirected to the proxy (the forward chain refuses them);
  // operator exceptions are, like any destination.
  const prerouting = [
    ...(exc ? [`${br} ip daddr ${exc} ip saddr vmap @proxied`] : []),
    `${br} ip daddr ${set([...METADATA_GUARDRAILS, i.cidr, ...(i.guardrails ?? [])])} return`,
    `${br} fib daddr type local return`,
    `${br} ip saddr vmap @proxied`,
  ];
  return `table inet ${i.table} {
  map egress { type ipv4_addr : verdict; }
  map proxied { type ipv4_addr : verdict; }
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
${lines.map((l) => `    ${l}`).join("\n")}
  }
  chain input {
    type filter hook input priority filter - 10; policy accept;
${input.map((l) => `    ${l}`).join("\n")}
  }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
${prerouting.map((l) => `    ${l}`).join("\n")}
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr ${i.cidr} oifname != "${i.bridge}" masquerade
  }
}
${i.vethPrefix ? guestL2Ruleset(i.table, i.vethPrefix) : ""}`;
}

/** Frames from guests that are neither IPv4 nor ARP (VLAN tags, IPv6, anything raw) never reach the bridge. */
export function guestL2Ruleset(table: string, vethPrefix: string): string {
  return `table bridge ${table} {
  chain guest {
    type filter hook prerouting priority filter; policy accept;
    iifname "${vethPrefix}*" ether type != { ip, arp } counter drop
  }
}
`;
}

export const slotChain = (id: string) => `sb_${id}`;

export type SlotPolicy = EgressPolicy;

export const natChain = (id: string) => `np_${id}`;
/** Per-slot records of destinations: every new flow (observe mode) and every refused one. */
export const observedSet = (id: string) => `ob_${id}`;
export const deniedSet = (id: string) => `dn_${id}`;
const DEST = "{ ip daddr . meta l4proto . th dport }";

function recordSetLines(table: string, id: string): string[] {
  return [observedSet(id), deniedSet(id)].map((n) => `add set inet ${table} ${n} { type ipv4_addr . inet_proto . inet_service; flags dynamic; size 4096; counter; }`);
}

/** The slot's nat chain: its TCP 80/443 to the egress proxy when its policy names domains for them. */
export function natRules(policy: SlotPolicy): string[] {
  return proxiesNamedPorts(policy) ? [`meta l4proto tcp th dport { ${NAMED_PORTS.join(", ")} } redirect to :${EGRESS_PROXY_PORT}`] : [];
}

export const domainSet = (id: string, ruleIndex: number) => `sb_${id}_${ruleIndex}`;

function portsExpr(r: EgressRule): string {
  const proto = r.protocol === "any" ? (r.ports ? "meta l4proto { tcp, udp } " : "") : `meta l4proto ${r.protocol} `;
  if (!r.ports) return proto;
  const ranges = r.ports.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`));
  return `${proto}th dport { ${ranges.join(", ")} } `;
}

/**
 * Rules of a slot chain: runs for every packet the slot sends out of the node.
 * `generation` tags the flows this version of the policy accepted.
 */
export function slotRules(id: string, policy: SlotPolicy, generation: number): string[] {
  const mark = generation >>> 0;
  const observe = policy.mode === "observe";
  const out = [`ct state established,related ct mark ${mark} accept`];
  if (observe) out.push(`ct state new meta l4proto { tcp, udp } add @${observedSet(id)} ${DEST}`);
  // A refusal is recorded, then made (in observe mode: recorded as one, then let through).
  const deny = (match: string) => [
    `${match}meta l4proto { tcp, udp } add @${deniedSet(id)} ${DEST}`,
    ...(observe ? [`${match}ct mark set ${mark} accept`] : reject(match, true)),
  ];
  policy.rules.forEach((r, k) => {
    const dst = r.cidr ? `ip daddr ${r.cidr} ` : `ip daddr @${domainSet(id, k)} `;
    const match = `${dst}${portsExpr(r)}`;
    if (r.action === "allow") out.push(`${match}ct mark set ${mark} accept`);
    else out.push(...deny(match));
  });
  if (policy.default === "allow") out.push(`ct mark set ${mark} accept`);
  else out.push(...deny(""));
  return out;
}

function setLines(table: string, id: string, policy: SlotPolicy): string[] {
  return domainRules(policy).map(({ index }) => `add set inet ${table} ${domainSet(id, index)} { type ipv4_addr; flags timeout; }`);
}

export function addSlotScript(table: string, id: string, address: string, policy: SlotPolicy, generation = 1): string {
  const chain = slotChain(id);
  return [
    `add chain inet ${table} ${chain}`,
    `flush chain inet ${table} ${chain}`,
    ...recordSetLines(table, id),
    ...setLines(table, id, policy),
    ...slotRules(id, policy, generation).map((r) => `add rule inet ${table} ${chain} ${r}`),
    `add element inet ${table} egress { ${address} : jump ${chain} }`,
    `add chain inet ${table} ${natChain(id)}`,
    `flush chain inet ${table} ${natChain(id)}`,
    ...natRules(policy).map((r) => `add rule inet ${table} ${natChain(id)} ${r}`),
    `add element inet ${table} proxied { ${address} : jump ${natChain(id)} }`,
  ].join("\n") + "\n";
}

/** Replaces a slot's policy in one transaction (the previous policy names its sets). */
export function setPolicyScript(table: string, id: string, policy: SlotPolicy, previous: SlotPolicy | undefined, generation = 1): string {
  const chain = slotChain(id);
  return [
    `flush chain inet ${table} ${chain}`,
    ...(previous ? domainRules(previous).map(({ index }) => `delete set inet ${table} ${domainSet(id, index)}`) : []),
    ...setLines(table, id, policy),
    ...slotRules(id, policy, generation).map((r) => `add rule inet ${table} ${chain} ${r}`),
    `flush chain inet ${table} ${natChain(id)}`,
    ...natRules(policy).map((r) => `add rule inet ${table} ${natChain(id)} ${r}`),
  ].join("\n") + "\n";
}

/** Binds resolved addresses to a domain rule's set until `timeoutSec` from now (refreshing an existing binding). */
export function bindScript(table: string, id: string, ruleIndex: number, addresses: string[], timeoutSec: number): string {
  const s = domainSet(id, ruleIndex);
  const t = Math.max(1, Math.ceil(timeoutSec));
  return [
    `add element inet ${table} ${s} { ${addresses.join(", ")} }`,
    `delete element inet ${table} ${s} { ${addresses.join(", ")} }`,
    `add element inet ${table} ${s} { ${addresses.map((a) => `${a} timeout ${t}s`).join(", ")} }`,
  ].join("\n") + "\n";
}

export function removeSlotScript(table: string, id: string, address: string | undefined, policy?: SlotPolicy): string {
  const lines: string[] = [];
  if (address) lines.push(`delete element inet ${table} egress { ${address} }`, `delete element inet ${table} proxied { ${address} }`);
  lines.push(`delete chain inet ${table} ${slotChain(id)}`, `delete chain inet ${table} ${natChain(id)}`);
  lines.push(`delete set inet ${table} ${observedSet(id)}`, `delete set inet ${table} ${deniedSet(id)}`);
  if (policy) for (const { index } of domainRules(policy)) lines.push(`delete set inet ${table} ${domainSet(id, index)}`);
  return lines.join("\n") + "\n";
}

/** Elements of an observed/denied set from `nft -j list set` (destination and flow count). */
export function parseRecordSet(json: string): { ip: string; protocol: "tcp" | "udp"; port: number; count: number }[] {
  type Elem = { elem?: { val?: { concat?: [string, string, number] }; counter?: { packets?: number } } };
  const doc = JSON.parse(json) as { nftables?: { set?: { elem?: Elem[] } }[] };
  const elems = doc.nftables?.find((x) => x.set)?.set?.elem ?? [];
  return elems.flatMap((e) => {
    const [ip, protocol, port] = e.elem?.val?.concat ?? [];
    if (!ip || (protocol !== "tcp" && protocol !== "udp") || typeof port !== "number") return [];
    return [{ ip, protocol, port, count: e.elem?.counter?.packets ?? 0 }];
  });
}
