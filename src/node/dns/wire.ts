/**
 * The little of the DNS wire format (RFC 1035) the node resolver needs: the question of a
 * query, the A records of an answer, and a minimal answer builder (tests' fake upstream,
 * SERVFAIL replies). Pure, unit-tested.
 */
export const TYPE_A = 1;
export const TYPE_CNAME = 5;
export const TYPE_AAAA = 28;

export interface Question {
  id: number;
  name: string;
  type: number;
  cls: number;
}
export interface ARecord {
  name: string;
  address: string;
  ttl: number;
}

function readName(buf: Buffer, offset: number): { name: string; next: number } {
  const labels: string[] = [];
  let pos = offset;
  let next = -1;
  for (let hops = 0; hops < 64; hops++) {
    if (pos >= buf.length) throw new Error("dns: name past the end");
    const len = buf[pos]!;
    if (len === 0) {
      if (next < 0) next = pos + 1;
      return { name: labels.join(".").toLowerCase(), next };
    }
    if ((len & 0xc0) === 0xc0) {
      if (pos + 1 >= buf.length) throw new Error("dns: truncated pointer");
      if (next < 0) next = pos + 2;
      pos = ((len & 0x3f) << 8) | buf[pos + 1]!;
      continue;
    }
    if (len > 63 || pos + 1 + len > buf.length) throw new Error("dns: bad label");
    labels.push(buf.toString("latin1", pos + 1, pos + 1 + len));
    pos += 1 + len;
  }
  throw new Error("dns: name loop");
}

/** The first question of a message (queries carry exactly one). */
export function parseQuestion(buf: Buffer): Question {
  if (buf.length < 12) throw new Error("dns: short message");
  if (buf.readUInt16BE(4) < 1) throw new Error("dns: no question");
  const { name, next } = readName(buf, 12);
  if (next + 4 > buf.length) throw new Error("dns: truncated question");
  return { id: buf.readUInt16BE(0), name, type: buf.readUInt16BE(next), cls: buf.readUInt16BE(next + 2) };
}

/** A records of the answer section (any owner name: CNAME chains end in them). */
export function parseAnswers(buf: Buffer): ARecord[] {
  if (buf.length < 12) return [];
  const qd = buf.readUInt16BE(4);
  const an = buf.readUInt16BE(6);
  let pos = 12;
  for (let i = 0; i < qd; i++) pos = readName(buf, pos).next + 4;
  const out: ARecord[] = [];
  for (let i = 0; i < an; i++) {
    const { name, next } = readName(buf, pos);
    if (next + 10 > buf.length) break;
    const type = buf.readUInt16BE(next);
    const ttl = buf.readUInt32BE(next + 4);
    const len = buf.readUInt16BE(next + 8);
    const data = next + 10;
    if (data + len > buf.length) break;
    if (type === TYPE_A && len === 4) out.push({ name, address: [...buf.subarray(data, data + 4)].join("."), ttl });
    pos = data + len;
  }
  return out;
}

function encodeName(name: string): Buffer {
  const parts = name.split(".").filter(Boolean);
  return Buffer.concat([...parts.map((p) => Buffer.concat([Buffer.from([p.length]), Buffer.from(p, "latin1")])), Buffer.from([0])]);
}

export function buildQuery(id: number, name: string, type = TYPE_A): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(0x0100, 2); // RD
  h.writeUInt16BE(1, 4);
  const q = Buffer.alloc(4);
  q.writeUInt16BE(type, 0);
  q.writeUInt16BE(1, 2);
  return Buffer.concat([h, encodeName(name), q]);
}

/** An answer to `query` with A records (rcode 3 NXDOMAIN when `addresses` is undefined). */
export function buildAnswer(query: Buffer, addresses: string[] | undefined, ttl = 60, rcode = 0): Buffer {
  const q = parseQuestion(query);
  const qEnd = readName(query, 12).next + 4;
  const h = Buffer.alloc(12);
  h.writeUInt16BE(q.id, 0);
  const code = addresses === undefined && rcode === 0 ? 3 : rcode;
  h.writeUInt16BE(0x8180 | code, 2); // QR RD RA
  h.writeUInt16BE(1, 4);
  const answers = q.type === TYPE_A ? (addresses ?? []) : [];
  h.writeUInt16BE(answers.length, 6);
  const rrs = answers.map((a) => {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0); // pointer to the question name
    rr.writeUInt16BE(TYPE_A, 2);
    rr.writeUInt16BE(1, 4);
    rr.writeUInt32BE(ttl, 6);
    rr.writeUInt16BE(4, 10);
    a.split(".").forEach((o, i) => rr.writeUInt8(Number(o), 12 + i));
    return rr;
  });
  return Buffer.concat([h, query.subarray(12, qEnd), ...rrs]);
}

/** SERVFAIL for a query we could not forward. */
export function servfail(query: Buffer): Buffer {
  return buildAnswer(query, [], 0, 2);
}

/** Splits a TCP DNS stream (2-byte length prefixes) into messages; returns the rest. */
export function splitTcp(buf: Buffer): { messages: Buffer[]; rest: Buffer } {
  const messages: Buffer[] = [];
  let pos = 0;
  while (pos + 2 <= buf.length) {
    const len = buf.readUInt16BE(pos);
    if (pos + 2 + len > buf.length) break;
    messages.push(buf.subarray(pos + 2, pos + 2 + len));
    pos += 2 + len;
  }
  return { messages, rest: buf.subarray(pos) };
}
export function frameTcp(msg: Buffer): Buffer {
  const l = Buffer.alloc(2);
  l.writeUInt16BE(msg.length);
  return Buffer.concat([l, msg]);
}
