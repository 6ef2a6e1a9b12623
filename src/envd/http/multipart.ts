/**
 * A small streaming multipart/form-data parser: part bodies go straight to a sink, so
 * a 100 MiB upload never sits in memory. Memory is bounded by one chunk plus the
 * delimiter length.
 */
import { SpaceError } from "../../core/errors.ts";

export interface PartSink {
  write(chunk: Buffer): Promise<void>;
  end(): Promise<void>;
}

export interface PartHeaders {
  name: string | undefined;
  filename: string | undefined;
  headers: Record<string, string>;
}

const MAX_HEADER_BYTES = 16 * 1024;

export function boundaryOf(contentType: string): string | undefined {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? (m[1] ?? m[2]) : undefined;
}

function parseDisposition(v: string): { name?: string; filename?: string } {
  const out: { name?: string; filename?: string } = {};
  const star = /filename\*=(?:UTF-8'')?([^;]+)/i.exec(v);
  if (star) out.filename = decodeURIComponent(star[1]!.trim().replace(/^"|"$/g, ""));
  for (const m of v.matchAll(/;\s*(name|filename)="((?:[^"\\]|\\.)*)"/gi)) {
    const key = m[1]!.toLowerCase() as "name" | "filename";
    const val = m[2]!.replace(/\\(.)/g, "$1");
    if (key === "filename" && out.filename !== undefined) continue;
    out[key] = val;
  }
  for (const m of v.matchAll(/;\s*(name|filename)=([^";\s]+)/gi)) {
    const key = m[1]!.toLowerCase() as "name" | "filename";
    out[key] ??= m[2]!;
  }
  return out;
}

export async function parseMultipart(
  body: AsyncIterable<Buffer>,
  boundary: string,
  onPart: (h: PartHeaders) => Promise<PartSink | undefined>,
): Promise<void> {
  const delim = Buffer.from(`\r\n--${boundary}`);
  // Treat the body as if it began with CRLF so the first delimiter looks like the rest.
  let buf: Buffer = Buffer.from("\r\n");
  type State = "preamble" | "after" | "headers" | "body" | "done";
  let state = "preamble" as State;
  let sink: PartSink | undefined;
  const feed = async (final: boolean): Promise<void> => {
    for (;;) {
      switch (state) {
        case "preamble": {
          const i = buf.indexOf(delim);
          if (i < 0) {
            buf = buf.subarray(Math.max(0, buf.length - delim.length + 1));
            return;
          }
          buf = buf.subarray(i + delim.length);
          state = "after";
          break;
        }
        case "after": {
          if (buf.length < 2) return;
          if (buf[0] === 0x2d && buf[1] === 0x2d) {
            state = "done";
            return;
          }
          // Tolerate transport padding before CRLF.
          const nl = buf.indexOf("\r\n");
          if (nl < 0) return;
          buf = buf.subarray(nl + 2);
          state = "headers";
          break;
        }
        case "headers": {
          const end = buf.indexOf("\r\n\r\n");
          if (end < 0) {
            if (buf.length > MAX_HEADER_BYTES) throw new SpaceError("invalid_argument", "multipart part headers too large");
            return;
          }
          const headers: Record<string, string> = {};
          for (const line of buf.subarray(0, end).toString("utf8").split("\r\n")) {
            const c = line.indexOf(":");
            if (c > 0) headers[line.slice(0, c).trim().toLowerCase()] = line.slice(c + 1).trim();
          }
          buf = buf.subarray(end + 4);
          const d = parseDisposition(headers["content-disposition"] ?? "");
          sink = await onPart({ name: d.name, filename: d.filename, headers });
          state = "body";
          break;
        }
        case "body": {
          const i = buf.indexOf(delim);
          if (i < 0) {
            const keep = final ? 0 : delim.length - 1;
            const n = buf.length - keep;
            if (n > 0) {
              await sink?.write(buf.subarray(0, n));
              buf = buf.subarray(n);
            }
            return;
          }
          if (i > 0) await sink?.write(buf.subarray(0, i));
          await sink?.end();
          sink = undefined;
          buf = buf.subarray(i + delim.length);
          state = "after";
          break;
        }
        case "done":
          return;
      }
    }
  };
  for await (const chunk of body) {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    await feed(false);
    if (state === "done") break;
  }
  if (state !== "done") throw new SpaceError("invalid_argument", "multipart body ended before its closing boundary");
}
