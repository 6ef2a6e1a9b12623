/**
 * One malformed request and how its answer counts: a 5xx (or no answer at all) is a
 * server error; an answer carrying internal text (database words, stack frames, source
 * paths, the stack's data directory) is a leak. Both are findings naming the request.
 */
import type { Tally } from "./report.ts";

export interface Req {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** What the case is, for the finding line. */
  what: string;
  /** A 5xx the E2B wire itself prescribes for this case (the gateway's 502 for an unknown sandbox). */
  wire5xx?: RegExp;
  /** A body past the server's limit: it may answer 413 and close while the body is still going out, which a client sees as a reset. */
  resetOk?: boolean;
}

const INTERNAL = [
  /postgres|pglite|SQLSTATE|syntax error at|relation "|violates [a-z ]*constraint|duplicate key|invalid byte sequence|unicode escape/i,
  /\bat [\w.<>$]+ \(|\.(ts|mjs|js):\d+:\d+|node_modules|\/src\/[a-z]/,
  /TypeError|ReferenceError|RangeError: (?!Invalid)|Cannot read propert|is not a function|undefined is not/,
];

export async function probe(t: Tally, r: Req, internalPaths: readonly string[], timeoutMs = 30_000): Promise<{ status: number; text: string }> {
  t.add("tried");
  let status = 0;
  let text = "";
  try {
    const res = await fetch(r.url, {
      method: r.method,
      headers: r.headers ?? {},
      ...(r.body !== undefined && r.method !== "GET" && r.method !== "HEAD" ? { body: r.body } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
    status = res.status;
    text = await head(res);
  } catch (e) {
    if (r.resetOk && /other side closed|ECONNRESET|EPIPE|SocketError/.test(String((e as Error).cause))) return { status, text };
    t.find("serverErrors", `${r.what}: ${r.method} ${short(r.url)}: no answer (${(e as Error).name}: ${(e as Error).message})`);
    return { status, text };
  }
  if (status >= 500 && !r.wire5xx?.test(text)) t.find("serverErrors", `${r.what}: ${r.method} ${short(r.url)} → ${status} ${text.slice(0, 200)}`);
  const leak = INTERNAL.find((re) => re.test(text)) ?? internalPaths.find((p) => p && text.includes(p));
  if (leak) t.find("leakedText", `${r.what}: ${r.method} ${short(r.url)} → ${status} carries internal text (${String(leak)}): ${text.slice(0, 200)}`);
  return { status, text };
}

/** The body's first 64 KiB (a read of /dev/zero streams forever, and that is an answer). */
async function head(res: Response): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    n += value.length;
    if (n >= 64 * 1024) {
      await reader.cancel();
      break;
    }
  }
  return Buffer.concat(chunks).toString("utf8");
}

function short(url: string): string {
  return url.length > 160 ? `${url.slice(0, 160)}…` : url;
}
