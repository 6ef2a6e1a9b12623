/**
 * The egress policy a node enforces for one sandbox: an ordered, first-match rule list
 * and a default. Both front doors (ECW/E2B semantics, Native policy v1) compile to this
 * form in src/sandboxes/egress-rules.ts; the node only evaluates it (nft.ts, dns/resolver.ts).
 *
 *   { default: "deny", rules: [{ action: "allow", domain: "*.example.com", protocol: "tcp", ports: [[443, 443]] }] }
 *
 * Domain rules hold the addresses the node resolver answered for a matching name (for
 * the answer's TTL); platform guardrails run before any rule (nft.ts base ruleset).
 * A contract: the control plane writes it into node-api bodies, the node enforces it.
 */
import { z } from "zod";
import { inCidr, isIpv4, isIpv4Cidr } from "../core/cidr.ts";

const DOMAIN = /^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** `example.com` or `*.example.com` (lowercase; no trailing dot). */
export function isDomainPattern(s: string): boolean {
  return s.length <= 253 && !isIpv4(s) && DOMAIN.test(s) && s.includes(".");
}
export function normalizeDomain(s: string): string {
  return s.trim().toLowerCase().replace(/\.$/, "");
}
/** `*.example.com` matches any name below example.com (not example.com itself). */
export function domainMatches(pattern: string, name: string): boolean {
  const n = normalizeDomain(name);
  if (pattern.startsWith("*.")) return n.endsWith(pattern.slice(1)) && n.length > pattern.length - 1;
  return n === pattern;
}

export const PortRange = z.tuple([z.number().int().min(1).max(65535), z.number().int().min(1).max(65535)]).refine(([a, b]) => a <= b, "port range start above end");

export const EgressRule = z
  .object({
    action: z.enum(["allow", "deny"]),
    /** Exactly one of cidr / domain. */
    cidr: z.string().refine(isIpv4Cidr, "an IPv4 address or CIDR").optional(),
    domain: z.string().transform(normalizeDomain).refine(isDomainPattern, "a domain or *.wildcard").optional(),
    protocol: z.enum(["any", "tcp", "udp"]).default("any"),
    /** Inclusive ranges; absent = every port (tcp/udp only). */
    ports: z.array(PortRange).max(64).optional(),
  })
  .strict()
  .refine((r) => (r.cidr === undefined) !== (r.domain === undefined), "a rule has exactly one of cidr or domain");
export type EgressRule = z.infer<typeof EgressRule>;

export const EgressPolicy = z
  .object({
    default: z.enum(["allow", "deny"]).default("allow"),
    /** First match wins. */
    rules: z.array(EgressRule).max(1024).default([]),
    /**
     * `observe`: nothing is blocked; every new flow's destination is recorded, and what the
     * rules would have denied is recorded apart (a proposed allow list is built from the
     * record, see proposeAllowList). Absent = enforce.
     */
    mode: z.enum(["enforce", "observe"]).optional(),
  })
  .strict();
export type EgressPolicy = z.infer<typeof EgressPolicy>;

export const OPEN_POLICY: EgressPolicy = { default: "allow", rules: [] };
export const CLOSED_POLICY: EgressPolicy = { default: "deny", rules: [] };

/** The policy of a slot, accepting the older all-or-nothing record form `{ allowInternetAccess }`. */
export function toEgressPolicy(p: unknown): EgressPolicy {
  if (p && typeof p === "object" && "allowInternetAccess" in p && !("rules" in p)) {
    return (p as { allowInternetAccess: boolean }).allowInternetAccess ? OPEN_POLICY : CLOSED_POLICY;
  }
  return EgressPolicy.parse(p ?? OPEN_POLICY);
}

/** Indexes of the rules that bind resolved names (each has its own nft set). */
export function domainRules(p: EgressPolicy): { index: number; rule: EgressRule }[] {
  return p.rules.flatMap((rule, index) => (rule.domain ? [{ index, rule }] : []));
}

/** Ports where a domain rule is judged by the connection's own name (HTTP Host / TLS SNI) at the node's egress proxy. */
export const NAMED_PORTS = [80, 443] as const;

const coversPort = (r: EgressRule, port: number) => !r.ports || r.ports.some(([a, b]) => a <= port && port <= b);

/**
 * Whether the slot's TCP 80/443 go through the node's egress proxy: some domain rule
 * applies to TCP on one of those ports. A name in the request is stronger than a DNS
 * binding (a shared or re-pointed address does not let another name through) and cheaper
 * (no resolver round trip needed before the first connection).
 */
export function proxiesNamedPorts(p: EgressPolicy): boolean {
  // Observe mode lets everything through the slot chain, where every flow is recorded.
  if (p.mode === "observe") return false;
  return p.rules.some((r) => r.domain && r.protocol !== "udp" && NAMED_PORTS.some((port) => coversPort(r, port)));
}

/**
 * The verdict for one TCP connection the proxy holds: the policy's first matching rule,
 * else its default. CIDR rules match the destination address; domain rules match the
 * name the connection carries (absent when it sent none: then only CIDR rules and the
 * default can decide). The same order the slot's nft chain applies.
 */
export function verdictFor(p: EgressPolicy, c: { ip: string; port: number; name?: string }): "allow" | "deny" {
  for (const r of p.rules) {
    if (r.protocol === "udp" || !coversPort(r, c.port)) continue;
    const hit = r.cidr ? inCidr(c.ip, r.cidr) : c.name !== undefined && domainMatches(r.domain!, c.name);
    if (hit) return r.action;
  }
  return p.default;
}

/** One destination a sandbox opened flows to, as the node recorded it. */
export const ObservedDestination = z
  .object({
    ip: z.string(),
    protocol: z.enum(["tcp", "udp"]),
    port: z.number().int(),
    /** New flows (for denied ones: refused attempts). */
    count: z.number().int(),
    /** Names the sandbox resolved to this address through the node resolver. */
    domains: z.array(z.string()),
  })
  .meta({ id: "ObservedDestination" });
export type ObservedDestination = z.infer<typeof ObservedDestination>;

/** A sandbox's record: destinations observed (observe mode) and refused (any mode). */
export const NetworkRecord = z.object({ observed: z.array(ObservedDestination), denied: z.array(ObservedDestination) });
export type NetworkRecord = z.infer<typeof NetworkRecord>;

/** A Native v1 rule (src/sandboxes/egress-rules.ts NativeRule, wire form). */
export interface ProposedRule {
  action: "allow";
  target: string;
  protocol: "tcp" | "udp";
  ports: number[];
}

/**
 * The observed set as an allow list that can be applied as is (Native `network`:
 * `{ default: "deny", rules }`): one rule per destination and protocol with its ports;
 * the destination is the domain the sandbox resolved for the address when there was one
 * (names outlive addresses), else the address itself.
 */
export function proposeAllowList(observed: ObservedDestination[]): { default: "deny"; rules: ProposedRule[] } {
  const byTarget = new Map<string, ProposedRule>();
  for (const o of observed) {
    for (const target of o.domains.length ? o.domains : [o.ip]) {
      const key = `${target} ${o.protocol}`;
      const r = byTarget.get(key) ?? { action: "allow" as const, target, protocol: o.protocol, ports: [] };
      if (!r.ports.includes(o.port)) r.ports.push(o.port);
      byTarget.set(key, r);
    }
  }
  const rules = [...byTarget.values()].map((r) => ({ ...r, ports: r.ports.sort((a, b) => a - b) }));
  return { default: "deny", rules: rules.sort((a, b) => (a.target === b.target ? a.protocol.localeCompare(b.protocol) : a.target.localeCompare(b.target))) };
}
