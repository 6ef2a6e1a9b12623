/**
 * The netlink messages that set up a slot: its veth from the node's side, and inside the
 * slot's network namespace its links, address, route and neighbour (rtnetlink) and its
 * public-ports rule (nftables), sent by the spawn server's addon (core/exec.ts `netlinkIn`).
 * They were two `ip -b` and an `nft -f`, three processes on every create: ~5 ms of CPU per
 * create in a burst (docs/capacity.md). Written here, not taken from a library: the Node.js netlink packages
 * open their socket in the caller's namespace, and a slot's must be opened inside its own.
 * Only what a slot needs; each message asks for an acknowledgement, and a refusal names the
 * step and the kernel's reason.
 */
import { endianness } from "node:os";
import { ipToInt } from "../../core/cidr.ts";
import { errnoName } from "../../core/errno.ts";
import { netlinkIn } from "../../core/exec.ts";
import type { CommandNamespaces } from "../../core/spawn-client.ts";

export const NETLINK_ROUTE = 0;
export const NETLINK_NETFILTER = 12;

const LE = endianness() === "LE";
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_REPLACE = 0x100;
const NLM_F_EXCL = 0x200;
const NLM_F_CREATE = 0x400;
const NLM_F_APPEND = 0x800;
const NLM_F_ACK_TLVS = 0x200;
const NLMSG_ERROR = 2;
const NLA_F_NESTED = 0x8000;
const NLMSGERR_ATTR_MSG = 1;

const RTM_NEWLINK = 16;
const RTM_GETLINK = 18;
const RTM_NEWADDR = 20;
const RTM_NEWROUTE = 24;
const RTM_NEWNEIGH = 28;
const AF_INET = 2;
const IFF_UP = 0x1;
const IFLA_ADDRESS = 1;
const IFLA_IFNAME = 3;
const IFLA_MASTER = 10;
const IFLA_LINKINFO = 18;
const IFLA_IFALIAS = 20;
const IFLA_NET_NS_FD = 28;
const IFLA_INFO_KIND = 1;
const IFLA_INFO_DATA = 2;
const IFLA_INFO_SLAVE_KIND = 4;
const IFLA_INFO_SLAVE_DATA = 5;
const VETH_INFO_PEER = 1;
const IFLA_BRPORT_ISOLATED = 33;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const RTA_GATEWAY = 5;
const RT_TABLE_MAIN = 254;
const RTPROT_BOOT = 3;
const RTN_UNICAST = 1;
const NDA_DST = 1;
const NDA_LLADDR = 2;
const NUD_PERMANENT = 0x80;

const NFNL_SUBSYS_NFTABLES = 10;
const NFNL_MSG_BATCH_BEGIN = 0x10;
const NFNL_MSG_BATCH_END = 0x11;
const NFT_MSG_NEWTABLE = 0;
const NFT_MSG_NEWCHAIN = 3;
const NFT_MSG_NEWRULE = 6;
const NFPROTO_IPV4 = 2;
const NF_INET_PRE_ROUTING = 0;
const NF_IP_PRI_NAT_DST = -100;
const NF_ACCEPT = 1;
const NFT_REG_1 = 1;
const NFT_META_IIFNAME = 6;
const NFT_META_L4PROTO = 16;
const NFT_PAYLOAD_NETWORK_HEADER = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER = 2;
const NFT_CMP_EQ = 0;
const NFT_CMP_NEQ = 1;
const NFT_NAT_DNAT = 1;
const IPPROTO_TCP = 6;
const IFNAMSIZ = 16;

/** The descriptor a request's `files[0]` has where it is sent (core/native/spawn.c's NETLINK_FILES_FD). */
export const NETLINK_FILES_FD = 100;

/** Netlink messages to send at once, and what each one does (named in a refusal). */
export interface NetlinkRequest {
  bytes: Buffer;
  /** `steps[seq - 1]`: the step of the message with that sequence number. */
  steps: string[];
  /** Files the messages name as descriptors NETLINK_FILES_FD + i (a network namespace's). */
  files?: string[];
}

const align = (n: number) => (n + 3) & ~3;

/** Host-order integers (netlink headers and rtnetlink fields). */
function host(size: 1 | 2 | 4, v: number): Buffer {
  const b = Buffer.alloc(size);
  if (size === 1) b.writeUInt8(v);
  else if (size === 2) {
    if (LE) b.writeUInt16LE(v);
    else b.writeUInt16BE(v);
  } else if (LE) b.writeInt32LE(v);
  else b.writeInt32BE(v);
  return b;
}

/** A network-order u32 (every nftables number). */
function be32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(v);
  return b;
}

function attr(type: number, data: Buffer): Buffer {
  const len = 4 + data.length;
  return Buffer.concat([host(2, len), host(2, type), data, Buffer.alloc(align(len) - len)]);
}

const nested = (type: number, ...attrs: Buffer[]) => attr(type | NLA_F_NESTED, Buffer.concat(attrs));
const cstring = (s: string) => Buffer.from(`${s}\0`);

function ipv4(address: string): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(ipToInt(address));
  return b;
}

function mac(address: string): Buffer {
  const parts = address.split(":").map((p) => Number.parseInt(p, 16));
  if (parts.length !== 6 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) throw new Error(`not a MAC address: ${address}`);
  return Buffer.from(parts);
}

/** Messages numbered 1.. in order, each acknowledged. */
class Messages {
  readonly #parts: Buffer[] = [];
  readonly steps: string[] = [];

  add(step: string, type: number, flags: number, header: Buffer, ...attrs: Buffer[]): this {
    const body = Buffer.concat([header, ...attrs]);
    this.steps.push(step);
    this.#parts.push(Buffer.concat([host(4, 16 + body.length), host(2, type), host(2, NLM_F_REQUEST | NLM_F_ACK | flags), host(4, this.steps.length), host(4, 0), body]));
    return this;
  }

  /** A message outside the numbering that asks for nothing back (a batch's bounds). */
  raw(type: number, header: Buffer): this {
    this.#parts.push(Buffer.concat([host(4, 16 + header.length), host(2, type), host(2, NLM_F_REQUEST), host(4, 0), host(4, 0), header]));
    return this;
  }

  request(): NetlinkRequest {
    return { bytes: Buffer.concat(this.#parts), steps: this.steps };
  }
}

function ifinfomsg(index: number, flags = 0, change = 0): Buffer {
  return Buffer.concat([host(1, 0), host(1, 0), host(2, 0), host(4, index), host(4, flags), host(4, change)]);
}

/** RTM_GETLINK of `name`: its answer carries the link's index (`linkIndexOf`). */
export function getLink(name: string): NetlinkRequest {
  return new Messages().add(`link show ${name}`, RTM_GETLINK, 0, ifinfomsg(0), attr(IFLA_IFNAME, cstring(name))).request();
}

export interface SlotVeth {
  /** The node's end (on the bridge). */
  hostVeth: string;
  /** The node's mark on it (what its cleanup recognises). */
  alias: string;
  bridge: string;
  /** The bridge's index (`getLink`). */
  bridgeIndex: number;
  /** The slot's network namespace (its file): the other end goes there, as `eth0`. */
  netnsPath: string;
  /** The slot's address and MAC: the node's permanent neighbour entry for it. */
  address: string;
  mac: string;
}

/**
 * A slot's veth from the node's side, as `ip` ran it: `link add <host> master <bridge> type
 * veth peer name eth0 netns <slot>`, then the node's mark (`alias`), the bridge port isolated
 * (isolated ports only talk to the bridge, never to each other: the L2 guardrail) and up,
 * and a permanent neighbour entry for the slot's address on the bridge (no ARP on the create
 * path; the MAC is the slot index's, so an entry for a reused address stays right).
 */
export function slotVeth(o: SlotVeth): NetlinkRequest {
  const m = new Messages()
    .add(`link add ${o.hostVeth} master ${o.bridge} type veth peer name eth0 netns ${o.netnsPath}`, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, ifinfomsg(0),
      attr(IFLA_IFNAME, cstring(o.hostVeth)), attr(IFLA_MASTER, host(4, o.bridgeIndex)),
      nested(IFLA_LINKINFO, attr(IFLA_INFO_KIND, cstring("veth")),
        nested(IFLA_INFO_DATA, attr(VETH_INFO_PEER, Buffer.concat([ifinfomsg(0), attr(IFLA_IFNAME, cstring("eth0")), attr(IFLA_NET_NS_FD, host(4, NETLINK_FILES_FD))])))))
    .add(`link set ${o.hostVeth} alias ${o.alias} type bridge_slave isolated on up`, RTM_NEWLINK, 0, ifinfomsg(0, IFF_UP, IFF_UP),
      attr(IFLA_IFNAME, cstring(o.hostVeth)), attr(IFLA_IFALIAS, Buffer.from(o.alias)),
      nested(IFLA_LINKINFO, attr(IFLA_INFO_SLAVE_KIND, cstring("bridge")), nested(IFLA_INFO_SLAVE_DATA, attr(IFLA_BRPORT_ISOLATED, host(1, 1)))))
    .add(`neigh replace ${o.address} lladdr ${o.mac} dev ${o.bridge} nud permanent`, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE,
      Buffer.concat([host(1, AF_INET), host(1, 0), host(2, 0), host(4, o.bridgeIndex), host(2, NUD_PERMANENT), host(1, 0), host(1, 0)]),
      attr(NDA_DST, ipv4(o.address)), attr(NDA_LLADDR, mac(o.mac)))
    .request();
  return { ...m, files: [o.netnsPath] };
}

export interface SlotInside {
  /** The index of the slot's `eth0` in its namespace (`getLink`). */
  eth0: number;
  mac: string;
  address: string;
  prefix: number;
  gateway: string;
  gatewayMac: string;
}

/**
 * A slot's side of its veth: loopback up, `eth0` with its MAC and address up, the default
 * route through the gateway and a permanent neighbour entry for it (no ARP on the create
 * path), as `ip` ran them: `link set lo up`, `link set eth0 address … up`, `addr add`,
 * `route add default via`, `neigh replace … nud permanent`.
 */
export function slotInside(o: SlotInside): NetlinkRequest {
  const addr = ipv4(o.address);
  const gw = ipv4(o.gateway);
  return new Messages()
    .add("link set lo up", RTM_NEWLINK, 0, ifinfomsg(1, IFF_UP, IFF_UP))
    .add(`link set eth0 address ${o.mac} up`, RTM_NEWLINK, 0, ifinfomsg(o.eth0, IFF_UP, IFF_UP), attr(IFLA_ADDRESS, mac(o.mac)))
    .add(`addr add ${o.address}/${o.prefix} dev eth0`, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL,
      Buffer.concat([host(1, AF_INET), host(1, o.prefix), host(1, 0), host(1, 0), host(4, o.eth0)]), attr(IFA_LOCAL, addr), attr(IFA_ADDRESS, addr))
    .add(`route add default via ${o.gateway}`, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL,
      Buffer.concat([host(1, AF_INET), host(1, 0), host(1, 0), host(1, 0), host(1, RT_TABLE_MAIN), host(1, RTPROT_BOOT), host(1, 0), host(1, RTN_UNICAST), host(4, 0)]),
      attr(RTA_GATEWAY, gw))
    .add(`neigh replace ${o.gateway} lladdr ${o.gatewayMac} dev eth0 nud permanent`, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE,
      Buffer.concat([host(1, AF_INET), host(1, 0), host(2, 0), host(4, o.eth0), host(2, NUD_PERMANENT), host(1, 0), host(1, 0)]),
      attr(NDA_DST, gw), attr(NDA_LLADDR, mac(o.gatewayMac)))
    .request();
}

const nfgen = (family: number, resId = 0) => Buffer.concat([host(1, family), host(1, 0), Buffer.from([resId >> 8, resId & 0xff])]);
const nftType = (cmd: number) => (NFNL_SUBSYS_NFTABLES << 8) | cmd;
const expr = (name: string, ...data: Buffer[]) => nested(1 /* NFTA_LIST_ELEM */, attr(1 /* NFTA_EXPR_NAME */, cstring(name)), nested(2 /* NFTA_EXPR_DATA */, ...data));
const value = (type: number, bytes: Buffer) => nested(type, attr(1 /* NFTA_DATA_VALUE */, bytes));
const meta = (key: number) => expr("meta", attr(1 /* DREG */, be32(NFT_REG_1)), attr(2 /* KEY */, be32(key)));
const payload = (base: number, offset: number, len: number) =>
  expr("payload", attr(1 /* DREG */, be32(NFT_REG_1)), attr(2 /* BASE */, be32(base)), attr(3 /* OFFSET */, be32(offset)), attr(4 /* LEN */, be32(len)));
const cmp = (op: number, bytes: Buffer) => expr("cmp", attr(1 /* SREG */, be32(NFT_REG_1)), attr(2 /* OP */, be32(op)), value(3 /* DATA */, bytes));

/**
 * The slot's public ports (slots.ts `loopbackPorts`): connections from the gateway to the
 * slot's address on any TCP port but envd's go to the slot's loopback, as nft made it from
 * `table ip space_ports { chain prerouting { type nat hook prerouting priority dstnat;
 * policy accept; iifname "eth0" ip saddr G ip daddr A tcp dport != P dnat to 127.0.0.1 } }`.
 */
export function portsRule(gateway: string, address: string, envdPort: number): NetlinkRequest {
  const table = attr(1 /* NFTA_*_TABLE */, cstring("space_ports"));
  const iifname = Buffer.alloc(IFNAMSIZ);
  iifname.write("eth0");
  const port = Buffer.alloc(2);
  port.writeUInt16BE(envdPort);
  return new Messages()
    .raw(NFNL_MSG_BATCH_BEGIN, nfgen(0, NFNL_SUBSYS_NFTABLES))
    .add("add table ip space_ports", nftType(NFT_MSG_NEWTABLE), NLM_F_CREATE, nfgen(NFPROTO_IPV4), table)
    .add("add chain ip space_ports prerouting", nftType(NFT_MSG_NEWCHAIN), NLM_F_CREATE, nfgen(NFPROTO_IPV4), table,
      attr(3 /* NFTA_CHAIN_NAME */, cstring("prerouting")),
      nested(4 /* NFTA_CHAIN_HOOK */, attr(1 /* HOOKNUM */, be32(NF_INET_PRE_ROUTING)), attr(2 /* PRIORITY */, be32(NF_IP_PRI_NAT_DST))),
      attr(5 /* NFTA_CHAIN_POLICY */, be32(NF_ACCEPT)), attr(7 /* NFTA_CHAIN_TYPE */, cstring("nat")))
    .add(`add rule ip space_ports prerouting (ports of ${address} to its loopback)`, nftType(NFT_MSG_NEWRULE), NLM_F_CREATE | NLM_F_APPEND, nfgen(NFPROTO_IPV4), table,
      attr(2 /* NFTA_RULE_CHAIN */, cstring("prerouting")),
      nested(4 /* NFTA_RULE_EXPRESSIONS */,
        meta(NFT_META_IIFNAME), cmp(NFT_CMP_EQ, iifname),
        payload(NFT_PAYLOAD_NETWORK_HEADER, 12, 4), cmp(NFT_CMP_EQ, ipv4(gateway)),
        payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4), cmp(NFT_CMP_EQ, ipv4(address)),
        meta(NFT_META_L4PROTO), cmp(NFT_CMP_EQ, Buffer.from([IPPROTO_TCP])),
        payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2), cmp(NFT_CMP_NEQ, port),
        expr("immediate", attr(1 /* DREG */, be32(NFT_REG_1)), value(2 /* DATA */, ipv4("127.0.0.1"))),
        expr("nat", attr(1 /* TYPE */, be32(NFT_NAT_DNAT)), attr(2 /* FAMILY */, be32(NFPROTO_IPV4)), attr(3 /* REG_ADDR_MIN */, be32(NFT_REG_1)))))
    .raw(NFNL_MSG_BATCH_END, nfgen(0, NFNL_SUBSYS_NFTABLES))
    .request();
}

export interface NetlinkReply {
  seq: number;
  type: number;
  flags: number;
  /** The message's payload (after its 16-byte header). */
  payload: Buffer;
}

/** The messages of the kernel's replies. */
export function parseReplies(bytes: Buffer): NetlinkReply[] {
  const out: NetlinkReply[] = [];
  const u32 = (at: number) => (LE ? bytes.readUInt32LE(at) : bytes.readUInt32BE(at));
  const u16 = (at: number) => (LE ? bytes.readUInt16LE(at) : bytes.readUInt16BE(at));
  for (let at = 0; at + 16 <= bytes.length; ) {
    const len = u32(at);
    if (len < 16 || at + len > bytes.length) break;
    out.push({ seq: u32(at + 8), type: u16(at + 4), flags: u16(at + 6), payload: bytes.subarray(at + 16, at + len) });
    at += align(len);
  }
  return out;
}

/** Throws when the kernel refused a message, naming its step, the errno and the kernel's reason. */
export function checkAcks(request: NetlinkRequest, replies: Buffer): NetlinkReply[] {
  const all = parseReplies(replies);
  const acked = new Set<number>();
  for (const r of all) {
    if (r.type !== NLMSG_ERROR) continue;
    const errno = -(LE ? r.payload.readInt32LE(0) : r.payload.readInt32BE(0));
    acked.add(r.seq);
    if (errno === 0) continue;
    const step = request.steps[r.seq - 1] ?? `message ${r.seq}`;
    throw new Error(`netlink: ${step}: ${errnoName(errno)}${reasonOf(r)}`);
  }
  const missing = request.steps.findIndex((_, i) => !acked.has(i + 1));
  if (missing >= 0) throw new Error(`netlink: ${request.steps[missing]}: no answer from the kernel`);
  return all;
}

/** The kernel's text (extended ack) after the echoed header, when it gave one. */
function reasonOf(r: NetlinkReply): string {
  if (!(r.flags & NLM_F_ACK_TLVS)) return "";
  for (let at = 4 + 16; at + 4 <= r.payload.length; ) {
    const len = LE ? r.payload.readUInt16LE(at) : r.payload.readUInt16BE(at);
    const type = LE ? r.payload.readUInt16LE(at + 2) : r.payload.readUInt16BE(at + 2);
    if (len < 4) break;
    if (type === NLMSGERR_ATTR_MSG) return ` (${r.payload.subarray(at + 4, at + len).toString().replace(/\0+$/, "")})`;
    at += align(len);
  }
  return "";
}

/** The index of the link a `getLink` answer describes. */
export function linkIndexOf(replies: NetlinkReply[]): number {
  const link = replies.find((r) => r.type === RTM_NEWLINK);
  if (!link) throw new Error("netlink: the kernel's answer carried no link");
  return LE ? link.payload.readInt32LE(4) : link.payload.readInt32BE(4);
}

/** Sends `request` from inside `namespaces` and checks every acknowledgement. */
export async function sendNetlink(protocol: number, request: NetlinkRequest, namespaces: CommandNamespaces, opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<NetlinkReply[]> {
  return checkAcks(request, await netlinkIn(protocol, request.bytes, namespaces, { ...opts, ...(request.files ? { files: request.files } : {}) }));
}
