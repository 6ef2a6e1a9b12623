/**
 * OpenTelemetry traces. Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set: then `startTracing` registers a
 * NodeTracerProvider (AsyncLocalStorage context, W3C traceparent propagation) exporting
 * OTLP/HTTP JSON in batches. When off, the SDK is never loaded and every helper here runs
 * on the API's no-op tracer (no provider, no context manager, no exporter).
 *
 * Spans follow a create, pause/restore, fork or command through the layers: the
 * `space.component` attribute names the layer (api, controller, sandboxes, substrate,
 * node, runtime); node-api calls carry `traceparent`, so a node in another process
 * continues the caller's trace.
 */
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from "@opentelemetry/api";
import type { FastifyInstance, FastifyRequest } from "fastify";

export type Component = "api" | "controller" | "sandboxes" | "substrate" | "node" | "runtime";

export interface TracingConfig {
  OTEL_EXPORTER_OTLP_ENDPOINT: string;
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: string;
  OTEL_SERVICE_NAME: string;
}

export interface Tracing {
  /** Exports what is still buffered, then stops. */
  shutdown(): Promise<void>;
}

let enabled = false;

/** Whether a provider is registered (the log mixin is installed only then). */
export function tracingEnabled(): boolean {
  return enabled;
}

/** Registers the global provider once per process; null when tracing is off (nothing loaded). */
export async function startTracing(config: TracingConfig, processName: string): Promise<Tracing | null> {
  const url = config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || (config.OTEL_EXPORTER_OTLP_ENDPOINT && `${config.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, "")}/v1/traces`);
  if (!url || enabled) return null;
  const [{ NodeTracerProvider }, { BatchSpanProcessor }, { OTLPTraceExporter }, { detectResources, envDetector, resourceFromAttributes }] = await Promise.all([
    import("@opentelemetry/sdk-trace-node"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/resources"),
  ]);
  // OTEL_RESOURCE_ATTRIBUTES and the other OTEL_* variables (headers, batch sizes) are the SDK's own.
  const resource = resourceFromAttributes({ "service.name": config.OTEL_SERVICE_NAME || `space-${processName}` }).merge(detectResources({ detectors: [envDetector] }));
  const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url }))] });
  provider.register();
  enabled = true;
  return {
    async shutdown() {
      await provider.shutdown();
      trace.disable();
      propagation.disable();
      context.disable();
      enabled = false;
    },
  };
}

export { SpanKind };

const tracer = () => trace.getTracer("space");

/** `inSpan` only inside a trace: background calls (heartbeats, metric pulls) start no trace of their own. */
export function inChildSpan<T>(name: string, component: Component, attributes: Attributes, fn: () => Promise<T>, kind = SpanKind.INTERNAL): Promise<T> {
  return trace.getActiveSpan() ? inSpan(name, component, attributes, fn, kind) : fn();
}

/** Runs `fn` in a span (the active one inside), recording a thrown error; the span ends when `fn` settles. */
export function inSpan<T>(name: string, component: Component, attributes: Attributes, fn: (span: Span) => Promise<T>, kind = SpanKind.INTERNAL): Promise<T> {
  return tracer().startActiveSpan(name, { kind, attributes: { "space.component": component, ...attributes } }, async (span) => {
    try {
      return await fn(span);
    } catch (e: unknown) {
      span.recordException(e instanceof Error ? e : String(e));
      span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
      throw e;
    } finally {
      span.end();
    }
  });
}

/** Adds `traceparent` (and `tracestate`) of the active span to outgoing headers; a no-op when tracing is off. */
export function withTraceHeaders(headers: Record<string, string>): Record<string, string> {
  propagation.inject(context.active(), headers);
  return headers;
}

/** The active span's W3C traceparent, to carry across a queue (null when there is none). */
export function currentTraceParent(): string | null {
  return withTraceHeaders({}).traceparent ?? null;
}

/** Runs `fn` with `traceParent` (currentTraceParent's) as the active remote parent; as is without one. */
export function continuingTrace<T>(traceParent: string | null, fn: () => T): T {
  if (!traceParent || !enabled) return fn();
  return context.with(propagation.extract(ROOT_CONTEXT, { traceparent: traceParent }), fn);
}

/** The active span's ids for a log line ({} when there is none). */
export function traceFields(): { trace_id?: string; span_id?: string } {
  const ctx = trace.getActiveSpan()?.spanContext();
  return ctx ? { trace_id: ctx.traceId, span_id: ctx.spanId } : {};
}

const UNTRACED_ROUTES = new Set(["/health", "/ready", "/metrics"]);

const requestSpans = new WeakMap<FastifyRequest, { span: Span; ctx: Context }>();

/**
 * A server span per request of a Fastify app, continuing an incoming `traceparent`.
 * The span runs from onRequest to the response's close and is the active context from
 * preHandler on (after the body is read: stream events would lose an earlier context),
 * so the handler's own spans are its children. Installed only when tracing is on;
 * `onlyContinued` traces only requests that arrive with a `traceparent`.
 */
export function installRequestSpans(app: FastifyInstance, component: Component, opts: { onlyContinued?: boolean } = {}): void {
  if (!enabled) return;
  app.addHook("onRequest", (req, reply, done) => {
    // A node's polls (inventory, health, metrics) carry no traceparent: no trace of their own.
    if (opts.onlyContinued && req.headers.traceparent === undefined) return done();
    // Probes and scrapes every few seconds would bury the traces people look for.
    if (UNTRACED_ROUTES.has(req.routeOptions.url ?? "")) return done();
    const parent = propagation.extract(context.active(), req.headers);
    const span = tracer().startSpan(
      `${component} ${req.method} ${req.routeOptions.url ?? "unmatched"}`,
      { kind: SpanKind.SERVER, attributes: { "space.component": component, "http.request.method": req.method, "http.route": req.routeOptions.url ?? "" } },
      parent,
    );
    requestSpans.set(req, { span, ctx: trace.setSpan(parent, span) });
    // "close" rather than onResponse: a hijacked reply (node-api's proxy) has no onResponse.
    reply.raw.once("close", () => {
      const status = reply.raw.statusCode;
      span.setAttribute("http.response.status_code", status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    });
    done();
  });
  app.addHook("preHandler", (req, _reply, done) => {
    const s = requestSpans.get(req);
    if (s) context.with(s.ctx, done);
    else done();
  });
}

/** A request's server span outside Fastify (the gateway): it ends with the response. */
export interface ServerSpan {
  /** Adds this span's `traceparent` to the headers of the request it forwards. */
  inject(headers: Record<string, unknown>): void;
  end(status: number): void;
}

/** A server span continuing the request's `traceparent`; null when tracing is off. */
export function startServerSpan(name: string, component: Component, headers: Record<string, unknown>, attributes: Attributes = {}): ServerSpan | null {
  if (!enabled) return null;
  const parent = propagation.extract(ROOT_CONTEXT, headers);
  const span = tracer().startSpan(name, { kind: SpanKind.SERVER, attributes: { "space.component": component, ...attributes } }, parent);
  const ctx = trace.setSpan(parent, span);
  return {
    inject: (out) => propagation.inject(ctx, out),
    end(status) {
      span.setAttribute("http.response.status_code", status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}
