/**
 * IPv4 helpers (pure, unit-tested): address and CIDR syntax for config and the egress
 * policy, and the arithmetic of the node's slot range and host routes. In core/ because
 * both the control plane and the node use them.
 */
const OCTET = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
const IPV4 = new RegExp(`^${OCTET}(\\.${OCTET}){3}$`);

export function isIpv4(s: string): boolean {
  return IPV4.test(s);
}
/** `a.b.c.d` or `a.b.c.d/n` (0..32). */
export function isIpv4Cidr(s: string): boolean {
  const [ip, bits, extra] = s.split("/");
  if (extra !== undefined || !ip || !isIpv4(ip)) return false;
  if (bits === undefined) return true;
  return /^\d{1,2}$/.test(bits) && Number(bits) <= 32;
}
export function ipToInt(ip: string): number {
  const p = ip.split(".").map(Number);
  if (p.length !== 4 || p.some((x) => !Number.isInteger(x) || x < 0 || x > 255)) throw new Error(`not an IPv4 address: ${ip}`);
  return ((p[0]! << 24) | (p[1]! << 16) | (p[2]! << 8) | p[3]!) >>> 0;
}
export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}
/** Whether `ip` lies in `cidr` (`a.b.c.d` or `a.b.c.d/n`). */
export function inCidr(ip: string, cidr: string): boolean {
  const [net, bits] = cidr.split("/");
  const prefix = bits === undefined ? 32 : Number(bits);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return ((ipToInt(ip) & mask) >>> 0) === ((ipToInt(net!) & mask) >>> 0);
}
export interface SlotRange {
  cidr: string;
  prefix: number;
  network: string;
  gateway: string;
  /** Address of slot `index` (0-based). */
  address(index: number): string;
  /** How many slots the range can hold (network, gateway and broadcast excluded). */
  size: number;
}
export function parseSlotRange(cidr: string): SlotRange {
  const [ip, bits] = cidr.split("/");
  const prefix = Number(bits);
  if (!Number.isInteger(prefix) || prefix < 8 || prefix > 29) throw new Error(`slot range ${cidr}: prefix must be /8 to /29`);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  const net = (ipToInt(ip!) & mask) >>> 0;
  const size = 2 ** (32 - prefix) - 3;
  return {
    cidr: `${intToIp(net)}/${prefix}`,
    prefix,
    network: intToIp(net),
    gateway: intToIp(net + 1),
    size,
    address(index: number) {
      if (index < 0 || index >= size) throw new Error(`slot ${index} outside ${cidr}`);
      return intToIp(net + 2 + index);
    },
  };
}

function block(cidr: string): { net: number; prefix: number } {
  const [ip, bits] = cidr.split("/");
  const prefix = bits === undefined ? 32 : Number(bits);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return { net: (ipToInt(ip!) & mask) >>> 0, prefix };
}

/** Whether two CIDRs share an address (one contains the other, since CIDR blocks nest). */
export function cidrsOverlap(a: string, b: string): boolean {
  const x = block(a);
  const y = block(b);
  const p = Math.min(x.prefix, y.prefix);
  const mask = p === 0 ? 0 : (0xffffffff << (32 - p)) >>> 0;
  return ((x.net & mask) >>> 0) === ((y.net & mask) >>> 0);
}

/** An IPv4 route of the host (`ip -j route`): `dst` is `default`, an address or a CIDR. */
export interface HostRoute {
  dst: string;
  dev?: string;
}

/**
 * Routes that overlap `cidr`, leaving out the default route and routes through `ownDev`
 * (the node's own bridge, kept from an earlier run: reused as it is).
 */
export function conflictingRoutes(cidr: string, ownDev: string, routes: HostRoute[]): HostRoute[] {
  return routes.filter((r) => r.dst !== "default" && r.dev !== ownDev && cidrsOverlap(cidr, r.dst));
}

export function describeRoute(r: HostRoute): string {
  return r.dev ? `${r.dst} dev ${r.dev}` : r.dst;
}
