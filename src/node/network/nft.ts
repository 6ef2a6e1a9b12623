/**
 * The node's nftables rules (table `inet space`), as nft scripts (pure, unit-tested).
 * Guardrails, always on: sandboxes cannot reach each other (also enforced at L2 by bridge
 * port isolation), the node itself (any of its addresses, loopback services included),
 * or link-local metadata addresses; IPv6 from sandboxes is dropped; egress is NATed.
 * Each slot has its own chain `sb_<id>` reached through the `egress` verdict map: the hook
 * the network-policy engine fills (now: allowInternetAccess=false → drop).
 */
export const DEFAULT_TABLE = "space";

export interface BaseRulesInput {
  table: string;
  bridge: string;
  cidr: string;
}

export function baseRuleset(i: BaseRulesInput): string {
  return `table inet ${i.table} {
  map egress { type ipv4_addr : verdict; }
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    iifname "${i.bridge}" oifname "${i.bridge}" drop
    iifname "${i.bridge}" ip saddr != ${i.cidr} drop
    iifname "${i.bridge}" ip daddr 169.254.0.0/16 drop
    iifname "${i.bridge}" ip daddr ${i.cidr} drop
    iifname "${i.bridge}" meta nfproto ipv6 drop
    iifname "${i.bridge}" ip saddr vmap @egress
    oifname "${i.bridge}" ip daddr ${i.cidr} ct state established,related accept
    oifname "${i.bridge}" ip daddr ${i.cidr} drop
  }
  chain input {
    type filter hook input priority filter - 10; policy accept;
    iifname "${i.bridge}" ct state established,related accept
    iifname "${i.bridge}" drop
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr ${i.cidr} oifname != "${i.bridge}" masquerade
  }
}
`;
}

export const slotChain = (id: string) => `sb_${id}`;

export interface SlotPolicy {
  allowInternetAccess: boolean;
}

/** Rules of a slot chain: runs for every packet the slot sends out of the node. */
export function slotRules(policy: SlotPolicy): string[] {
  return policy.allowInternetAccess ? [] : ["drop"];
}

export function addSlotScript(table: string, id: string, address: string, policy: SlotPolicy): string {
  const chain = slotChain(id);
  return [
    `add chain inet ${table} ${chain}`,
    `flush chain inet ${table} ${chain}`,
    ...slotRules(policy).map((r) => `add rule inet ${table} ${chain} ${r}`),
    `add element inet ${table} egress { ${address} : jump ${chain} }`,
  ].join("\n") + "\n";
}

export function setPolicyScript(table: string, id: string, policy: SlotPolicy): string {
  const chain = slotChain(id);
  return [`flush chain inet ${table} ${chain}`, ...slotRules(policy).map((r) => `add rule inet ${table} ${chain} ${r}`)].join("\n") + "\n";
}

export function removeSlotScript(table: string, id: string, address: string | undefined): string {
  const lines: string[] = [];
  if (address) lines.push(`delete element inet ${table} egress { ${address} }`);
  lines.push(`delete chain inet ${table} ${slotChain(id)}`);
  return lines.join("\n") + "\n";
}
