/**
 * One egress engine, two front doors: both compile to the node's EgressPolicy
 * (src/contract/egress-policy.ts: ordered first-match rules and a default), which the node
 * enforces with nftables in the slot's path and its DNS resolver (domain rules).
 *
 * ECW (E2B semantics): `allow_internet_access: false` ≡ `denyOut: ['0.0.0.0/0']`;
 * `allowOut` entries (IP, CIDR, domain, `*.wildcard`) are exceptions to `denyOut`, so they
 * come first; `denyOut` takes IPs/CIDRs only (a domain there is a 400); a domain entry
 * covers TCP 80 and 443 (where E2B matches the HTTP Host / TLS SNI), other ports fall back
 * to IP/CIDR entries.
 *
 * Native policy v1 (SPACE semantics): explicit rules `{ action, target, protocol, ports }`
 * where every deny precedes every allow, then `default` (allow unless
 * `allow_internet_access: false`).
 *
 * Platform guardrails (node addresses, other sandboxes, link-local/metadata, operator
 * listed addresses) are not part of a policy: the node applies them before any rule.
 */
import { z } from "zod";
import { SpaceError } from "../core/errors.ts";
import { EgressPolicy, isDomainPattern, normalizeDomain, type EgressRule } from "../contract/egress-policy.ts";
import { isIpv4Cidr } from "../core/cidr.ts";

export { EgressPolicy };

export const ALL_TRAFFIC = "0.0.0.0/0";
/** Ports where E2B matches a domain entry (HTTP Host on 80, TLS SNI on 443). */
export const DOMAIN_PORTS: [number, number][] = [[80, 80], [443, 443]];

const invalid = (message: string, field: string) => new SpaceError("invalid_argument", message, { details: { field } });

export interface EcwNetwork {
  allowOut?: string[];
  denyOut?: string[];
}

/** Classifies one ECW entry: a CIDR (a bare IP becomes /32) or a domain pattern. */
function ecwTarget(entry: string, field: string): { cidr: string } | { domain: string } {
  const e = entry.trim();
  if (isIpv4Cidr(e)) return { cidr: e.includes("/") ? e : `${e}/32` };
  const d = normalizeDomain(e);
  if (isDomainPattern(d)) return { domain: d };
  throw invalid(`${field}: '${entry}' is not an IPv4 address, CIDR or domain`, field);
}

export function compileEcw(allowInternetAccess: boolean, network: EcwNetwork | null | undefined): EgressPolicy {
  const rules: EgressRule[] = [];
  for (const entry of network?.allowOut ?? []) {
    const t = ecwTarget(entry, "network.allowOut");
    rules.push("cidr" in t ? { action: "allow", cidr: t.cidr, protocol: "any" } : { action: "allow", domain: t.domain, protocol: "tcp", ports: DOMAIN_PORTS });
  }
  const deny = [...(network?.denyOut ?? []), ...(allowInternetAccess ? [] : [ALL_TRAFFIC])];
  for (const entry of deny) {
    const t = ecwTarget(entry, "network.denyOut");
    if (!("cidr" in t)) throw invalid(`network.denyOut: '${entry}' is a domain; denyOut takes IP addresses and CIDRs only`, "network.denyOut");
    rules.push({ action: "deny", cidr: t.cidr, protocol: "any" });
  }
  // A trailing deny of everything is the default itself.
  const last = rules.at(-1);
  if (last?.action === "deny" && last.cidr === "0.0.0.0/0") {
    rules.pop();
    return { default: "deny", rules };
  }
  return { default: "allow", rules };
}

/** Checks an ECW network body at the API edge (400 before anything is stored). */
export function validateEcw(allowInternetAccess: boolean, network: EcwNetwork | null | undefined): void {
  compileEcw(allowInternetAccess, network);
}

/**
 * The policy a stored sandbox runs under: a Native-compiled policy stored with it
 * (`network.spacePolicy`), else the ECW fields. The one function every create, update and
 * re-creation (restore, fork, restart) calls, so the rules follow the sandbox.
 */
export function egressPolicyOf(allowInternetAccess: boolean, network: (EcwNetwork & { spacePolicy?: unknown }) | null | undefined): EgressPolicy {
  if (network?.spacePolicy) {
    const p = EgressPolicy.parse(network.spacePolicy);
    return allowInternetAccess ? p : { ...p, default: "deny" };
  }
  return compileEcw(allowInternetAccess, network);
}

// ------------------------------------------------------------------ Native v1

const PortSpec = z.union([
  z.number().int().min(1).max(65535),
  z.string().regex(/^\d{1,5}(-\d{1,5})?$/, "a port or a range such as 8000-8100"),
]);

export const NativeRule = z
  .object({
    action: z.enum(["allow", "deny"]),
    target: z.string().min(1).max(253).meta({ description: "IPv4 address, CIDR, domain or *.wildcard domain" }),
    protocol: z.enum(["any", "tcp", "udp"]).default("any"),
    ports: z.array(PortSpec).min(1).max(64).optional().meta({ description: "ports or ranges (tcp/udp); absent = all" }),
  })
  .strict()
  .meta({ id: "NetworkRule" });
export type NativeRule = z.infer<typeof NativeRule>;

export interface NativeNetwork {
  allow_internet_access?: boolean;
  allow_out?: string[];
  deny_out?: string[];
  rules?: NativeRule[];
  default?: "allow" | "deny";
  /** `observe`: record every destination instead of blocking (see EgressPolicy.mode). */
  mode?: "enforce" | "observe";
}

function portRange(p: number | string, field: string): [number, number] {
  const [x, y] = String(p).split("-");
  const a = Number(x);
  const b = Number(y ?? x);
  if (!(a >= 1 && b <= 65535 && a <= b)) throw invalid(`${field}: '${p}' is not a port or an ascending range within 1-65535`, field);
  return [a, b];
}

/**
 * Native policy v1: deny rules first (in order), then allow rules, then the default.
 * `allow_out` / `deny_out` are shorthands for allow / deny rules on any protocol and port.
 */
export function compileNative(n: NativeNetwork | null | undefined): EgressPolicy {
  const all: NativeRule[] = [
    ...(n?.deny_out ?? []).map((target) => ({ action: "deny" as const, target, protocol: "any" as const })),
    ...(n?.allow_out ?? []).map((target) => ({ action: "allow" as const, target, protocol: "any" as const })),
    ...(n?.rules ?? []),
  ];
  const compiled = all.map((r, i): EgressRule => {
    const field = `network.rules[${i}]`;
    const t = r.target.trim();
    const ports = r.ports?.map((p) => portRange(p, `${field}.ports`));
    const base = { action: r.action, protocol: r.protocol ?? "any", ...(ports ? { ports } : {}) } as const;
    if (isIpv4Cidr(t)) return { ...base, cidr: t.includes("/") ? t : `${t}/32` };
    const d = normalizeDomain(t);
    if (isDomainPattern(d)) return { ...base, domain: d };
    throw invalid(`${field}.target: '${r.target}' is not an IPv4 address, CIDR or domain`, `${field}.target`);
  });
  const def = n?.default ?? (n?.allow_internet_access === false ? "deny" : "allow");
  return EgressPolicy.parse({
    default: def,
    rules: [...compiled.filter((r) => r.action === "deny"), ...compiled.filter((r) => r.action === "allow")],
    ...(n?.mode === "observe" ? { mode: "observe" } : {}),
  });
}
