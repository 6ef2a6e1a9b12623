/**
 * An OTLP/HTTP traces receiver (POST /v1/traces, the exporter's JSON encoding, decoded as
 * the OTLP spec defines it: ids in hex, spans under resourceSpans → scopeSpans), for the
 * traces e2e test and the benches' per-phase breakdowns.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  component: string;
  service: string;
  attributes: Record<string, unknown>;
  /** Start and end, in ms since the epoch (sub-ms precision). */
  startMs: number;
  endMs: number;
}

export interface OtlpReceiver {
  /** The endpoint for OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  /** Every span received, in arrival order. */
  spans: ReceivedSpan[];
  server: Server;
}

type AnyValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
type KeyValue = { key: string; value: AnyValue };

/** OTLP/JSON ids are hex (the spec); a base64 id (protobuf-JSON mapping) is converted. */
function hexId(id: string | undefined): string {
  if (!id) return "";
  return /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, "base64").toString("hex");
}

function attrs(kvs: KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  // OTLP/JSON writes 64-bit integers as strings or numbers.
  for (const kv of kvs ?? []) out[kv.key] = kv.value.stringValue ?? (kv.value.intValue !== undefined ? Number(kv.value.intValue) : undefined) ?? kv.value.boolValue ?? kv.value.doubleValue;
  return out;
}

/** Nanoseconds since the epoch (a 64-bit integer, as a string or number) in ms. */
const nanosToMs = (n: string | number | undefined) => (n === undefined ? NaN : Number(BigInt(n) / 1000n) / 1000);

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces" || !String(req.headers["content-type"]).startsWith("application/json")) {
        res.writeHead(415).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
        resourceSpans?: Array<{
          resource?: { attributes?: KeyValue[] };
          scopeSpans?: Array<{
            spans?: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string; attributes?: KeyValue[]; startTimeUnixNano?: string | number; endTimeUnixNano?: string | number }>;
          }>;
        }>;
      };
      for (const rs of body.resourceSpans ?? []) {
        const service = String(attrs(rs.resource?.attributes)["service.name"] ?? "");
        for (const ss of rs.scopeSpans ?? [])
          for (const s of ss.spans ?? []) {
            const a = attrs(s.attributes);
            spans.push({
              traceId: hexId(s.traceId),
              spanId: hexId(s.spanId),
              parentSpanId: hexId(s.parentSpanId),
              name: s.name,
              component: String(a["space.component"] ?? ""),
              service,
              attributes: a,
              startMs: nanosToMs(s.startTimeUnixNano),
              endMs: nanosToMs(s.endTimeUnixNano),
            });
          }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, server };
}

/** One phase of a trace: a span's path of names from the root, and its duration. */
export interface Phase {
  /** Names from the root down; a repeated sibling name gets `#2`, `#3`. */
  path: string[];
  durationMs: number;
  /** Start, from the root's start. */
  offsetMs: number;
}

/** The spans of `traceId` below `root` (inclusive), depth first, siblings by start. */
export function phasesOf(spans: readonly ReceivedSpan[], root: ReceivedSpan): Phase[] {
  const children = new Map<string, ReceivedSpan[]>();
  for (const s of spans) if (s.traceId === root.traceId) children.set(s.parentSpanId, [...(children.get(s.parentSpanId) ?? []), s]);
  const out: Phase[] = [];
  const walk = (s: ReceivedSpan, path: string[]) => {
    out.push({ path, durationMs: s.endMs - s.startMs, offsetMs: s.startMs - root.startMs });
    const seen = new Map<string, number>();
    for (const c of (children.get(s.spanId) ?? []).sort((a, b) => a.startMs - b.startMs)) {
      const n = (seen.get(c.name) ?? 0) + 1;
      seen.set(c.name, n);
      walk(c, [...path, n === 1 ? c.name : `${c.name}#${n}`]);
    }
  };
  walk(root, [root.name]);
  return out;
}
