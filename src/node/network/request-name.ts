/**
 * The name a connection asks for in its first bytes, as the egress proxy reads it: the
 * HTTP/1 `Host` header, or the server_name (SNI) of a TLS ClientHello. Pure, unit-tested.
 *
 *   requestName(bytes) → { done: true, name: "api.example.com" } | { done: false } (need more bytes)
 *   done with no name: the client sent something else (or no name); only IP rules can judge it.
 */
import { normalizeDomain } from "../../contract/egress-policy.ts";

/** Bytes the proxy reads at most before judging (an HTTP head or a ClientHello record fits). */
export const MAX_PEEK = 16 * 1024 + 5;

export type Peek = { done: false } | { done: true; name?: string };

const MORE: Peek = { done: false };
const clean = (n: string | undefined): string | undefined => {
  if (!n) return undefined;
  const d = normalizeDomain(n.replace(/:\d+$/, ""));
  return /^[a-z0-9*_.-]+$/.test(d) ? d : undefined;
};

export function requestName(b: Buffer): Peek {
  if (b.length === 0) return MORE;
  return b[0] === 0x16 ? tlsServerName(b) : httpHost(b);
}

/** The Host header of an HTTP/1 request head (done once the head ends or the peek limit is hit). */
export function httpHost(b: Buffer): Peek {
  const text = b.subarray(0, MAX_PEEK).toString("latin1");
  // A request line starts with a method token (e.g. `GET `); anything else is not HTTP.
  if (!/^[A-Z]{1,10}( |$)/.test(text.slice(0, 11))) return { done: true };
  const end = text.indexOf("\r\n\r\n");
  const head = end >= 0 ? text.slice(0, end) : text;
  const host = /\r\nhost:[ \t]*([^\r\n]*)/i.exec(head)?.[1]?.trim();
  if (end < 0 && b.length < MAX_PEEK) return host ? { done: true, name: clean(host) } : MORE;
  return { done: true, name: clean(host) };
}

/** The SNI of a TLS ClientHello in the first record (done once the record is complete). */
export function tlsServerName(b: Buffer): Peek {
  if (b.length < 5) return MORE;
  const recordLen = b.readUInt16BE(3);
  if (b.length < 5 + recordLen) return b.length >= MAX_PEEK ? { done: true } : MORE;
  const r = b.subarray(5, 5 + recordLen);
  try {
    if (r[0] !== 0x01) return { done: true };
    let i = 4 + 2 + 32; // handshake header, client version, random
    i += 1 + r[i]!; // session id
    i += 2 + r.readUInt16BE(i); // cipher suites
    i += 1 + r[i]!; // compression methods
    const extEnd = Math.min(r.length, i + 2 + r.readUInt16BE(i));
    i += 2;
    while (i + 4 <= extEnd) {
      const type = r.readUInt16BE(i);
      const len = r.readUInt16BE(i + 2);
      i += 4;
      if (type === 0) {
        // server_name_list: list length, then entries of (type, length, name); type 0 = host_name.
        let j = i + 2;
        while (j + 3 <= i + len) {
          const nameType = r[j]!;
          const nameLen = r.readUInt16BE(j + 1);
          if (nameType === 0) return { done: true, name: clean(r.subarray(j + 3, j + 3 + nameLen).toString("latin1")) };
          j += 3 + nameLen;
        }
        return { done: true };
      }
      i += len;
    }
  } catch {
    // A truncated or malformed hello carries no name we can trust.
  }
  return { done: true };
}
