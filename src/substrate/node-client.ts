/**
 * Typed HTTP client for one node's node-api (src/contract/node-api.ts). Every call
 * carries the internal token; node errors `{code,message}` come back as SpaceError with
 * the same code, so a node's `invalid_argument` stays a 400 at the public edge.
 */
import { Agent, request, type Dispatcher } from "undici";
import { z } from "zod";
import {
  NodeError,
  NodeHealth,
  NodeInventory,
  NetworkRecord,
  SandboxMetrics,
  SandboxMetricsHistory,
  SandboxStatus,
  type MetricsRange,
  NODE_TOKEN_HEADER,
  type SandboxEgress,
  type SandboxInit,
  type SandboxSpec,
} from "../contract/node-api.ts";
import { SnapshotDescriptor, type SnapshotKind } from "../contract/snapshot-descriptor.ts";
import { logQueryString, SandboxLogs, type LogQuery } from "../contract/sandbox-logs.ts";
import { NodeBuildStatusSchema, type NodeBuildRequest } from "../contract/node-builds.ts";
import { NodeVolume, VolumeSent } from "../contract/volume-wire.ts";
import { SpaceError, errorCodes, fromHttpStatus, unavailable, type ErrorCode } from "../core/errors.ts";
import { inChildSpan, SpanKind, withTraceHeaders } from "../core/tracing.ts";

/**
 * One pool of kept-alive connections per node address, shared by every NodeClient of the
 * process. undici's `request` rather than `fetch`: fetch's WHATWG layer (Request, Headers,
 * Response, web streams) cost ~0.4 ms of CPU per call, on every create and kill. No
 * header or body timeout of its own: each call's deadline is its signal.
 */
const nodeDispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0 });

export interface NodeClientOptions {
  /** e.g. http://127.0.0.1:3002 */
  baseUrl: string;
  internalToken: string;
  /** Per-call deadline unless the call says otherwise. */
  timeoutMs?: number;
}

export class NodeClient {
  readonly baseUrl: string;
  readonly #token: string;
  readonly #timeoutMs: number;

  constructor(opts: NodeClientOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.#token = opts.internalToken;
    this.#timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** Headers that authenticate the control plane to the node (also used by the gateway). */
  authHeaders(): Record<string, string> {
    return { authorization: `Bearer ${this.#token}` };
  }

  health(signal: AbortSignal) {
    return this.#call("GET", "/health", undefined, NodeHealth, signal);
  }
  inventory(signal: AbortSignal) {
    return this.#call("GET", "/v1/inventory", undefined, NodeInventory, signal);
  }
  /** Resolves after envd is healthy; creation may take long (template pull), so 5 min. */
  createSandbox(spec: SandboxSpec, signal: AbortSignal) {
    return this.#call("POST", "/v1/sandboxes", spec, SandboxStatus, signal, 300_000);
  }
  getSandbox(id: string, signal: AbortSignal) {
    return this.#call("GET", `/v1/sandboxes/${enc(id)}`, undefined, SandboxStatus, signal);
  }
  listSandboxes(signal: AbortSignal) {
    return this.#call("GET", "/v1/sandboxes", undefined, z.object({ sandboxes: z.array(SandboxStatus) }), signal);
  }
  lifecycle(id: string, verb: "pause" | "resume" | "stop" | "start", signal: AbortSignal) {
    return this.#call("POST", `/v1/sandboxes/${enc(id)}/${verb}`, {}, SandboxStatus, signal, 120_000);
  }
  /** Boots a stopped sandbox again; resolves after envd is healthy (a cold boot: 5 min). */
  restart(id: string, signal: AbortSignal) {
    return this.#call("POST", `/v1/sandboxes/${enc(id)}/start`, {}, SandboxStatus, signal, 300_000);
  }
  /** On the create path (warm-member adoption): a short deadline, the caller falls back to a cold create. */
  init(id: string, body: SandboxInit, signal: AbortSignal) {
    return this.#call("POST", `/v1/sandboxes/${enc(id)}/init`, body, SandboxStatus, signal, 10_000);
  }
  /** Idempotent: 404 from the node counts as done. */
  async killSandbox(id: string, signal: AbortSignal): Promise<void> {
    try {
      await this.#call("DELETE", `/v1/sandboxes/${enc(id)}`, undefined, null, signal, 60_000);
    } catch (e) {
      if (e instanceof SpaceError && e.code === "not_found") return;
      throw e;
    }
  }
  /** Applies the egress policy of a running sandbox (what the node supports today). */
  egress(id: string, body: SandboxEgress, signal: AbortSignal) {
    return this.#call("POST", `/v1/sandboxes/${enc(id)}/egress`, body, SandboxStatus, signal);
  }
  /** Headers for the proxy route: the token travels in its own header so the client's Authorization passes. */
  proxyHeaders(): Record<string, string> {
    return { [NODE_TOKEN_HEADER]: this.#token };
  }
  /** Destinations the sandbox's slot recorded (observe mode) and refused. */
  networkRecord(id: string, signal: AbortSignal) {
    return this.#call("GET", `/v1/sandboxes/${enc(id)}/network`, undefined, NetworkRecord, signal);
  }
  metrics(id: string, signal: AbortSignal) {
    return this.#call("GET", `/v1/sandboxes/${enc(id)}/metrics`, undefined, SandboxMetrics, signal);
  }
  async metricsHistory(id: string, range: MetricsRange, signal: AbortSignal) {
    const q = new URLSearchParams();
    if (range.startMs !== undefined) q.set("startMs", String(range.startMs));
    if (range.endMs !== undefined) q.set("endMs", String(range.endMs));
    return (await this.#call("GET", `/v1/sandboxes/${enc(id)}/metrics/history?${q}`, undefined, SandboxMetricsHistory, signal)).samples;
  }
  async logs(id: string, query: LogQuery, signal: AbortSignal) {
    return (await this.#call("GET", `/v1/sandboxes/${enc(id)}/logs?${logQueryString(query)}`, undefined, SandboxLogs, signal)).logs;
  }
  /** Memory checkpoint (unless `kind: "disk"`) + disk snapshot; the sandbox leaves the node. Upload may take minutes. */
  suspend(id: string, body: { snapshotId: string; upload: boolean; kind?: SnapshotKind }, signal: AbortSignal) {
    return this.#call("POST", `/v1/sandboxes/${enc(id)}/suspend`, body, SnapshotDescriptor, signal, 600_000);
  }
  /** Capture: a snapshot of a sandbox that keeps running (fork source, named snapshots). */
  capture(id: string, body: { snapshotId: string; upload: boolean; restoreAs?: string[] }, signal: AbortSignal) {
    return this.#call("POST", `/v1/sandboxes/${enc(id)}/capture`, body, SnapshotDescriptor, signal, 600_000);
  }
  restore(spec: SandboxSpec, snapshot: SnapshotDescriptor, signal: AbortSignal) {
    return this.#call("POST", "/v1/restores", { spec, snapshot }, SandboxStatus, signal, 600_000);
  }
  /** Puts a local copy's parts in the blob store; the descriptor with them (durable). Upload may take minutes. */
  publishSnapshot(snapshotId: string, signal: AbortSignal) {
    return this.#call("POST", `/v1/snapshots/${enc(snapshotId)}/publish`, {}, SnapshotDescriptor, signal, 600_000);
  }
  /** Idempotent: frees the node's local copy. */
  async dropSnapshot(snapshotId: string, signal: AbortSignal): Promise<void> {
    await this.#call("DELETE", `/v1/snapshots/${enc(snapshotId)}`, undefined, null, signal);
  }
  /** Starts a template build (idempotent by build id); the node answers at once (202) and builds in the background. */
  async startBuild(req: NodeBuildRequest, signal: AbortSignal): Promise<void> {
    await this.#call("POST", "/v1/builds", req, null, signal, 120_000);
  }
  /** A build's status and its log entries from `logsOffset`. */
  buildStatus(buildId: string, logsOffset: number, signal: AbortSignal) {
    return this.#call("GET", `/v1/builds/${enc(buildId)}?logsOffset=${logsOffset}`, undefined, NodeBuildStatusSchema, signal, 120_000);
  }
  /** Points node template `alias` at the built template `name` (what sandboxes of the template boot). */
  async pointTemplate(alias: string, name: string, signal: AbortSignal): Promise<void> {
    await this.#call("PUT", `/v1/templates/${enc(alias)}`, { name }, null, signal, 120_000);
  }
  /** Idempotent: removes a node template (and its blob store catalog entry). */
  async dropTemplate(name: string, signal: AbortSignal): Promise<void> {
    await this.#call("DELETE", `/v1/templates/${enc(name)}`, undefined, null, signal, 120_000);
  }
  /** Makes the volume (exists = ok) with its quota. */
  ensureVolume(id: string, sizeMib: number, signal: AbortSignal) {
    return this.#call("PUT", `/v1/volumes/${enc(id)}`, { sizeMib }, NodeVolume, signal, 120_000);
  }
  volume(id: string, signal: AbortSignal) {
    return this.#call("GET", `/v1/volumes/${enc(id)}`, undefined, NodeVolume, signal);
  }
  /** Idempotent: absent = ok. */
  async deleteVolume(id: string, signal: AbortSignal): Promise<void> {
    await this.#call("DELETE", `/v1/volumes/${enc(id)}`, undefined, null, signal, 120_000);
  }
  /** Sends a copy of the volume to the blob store at `key`. */
  sendVolume(id: string, key: string, signal: AbortSignal) {
    return this.#call("POST", `/v1/volumes/${enc(id)}/send`, { key }, VolumeSent, signal, 30 * 60_000);
  }
  /** Receives a sent volume from the blob store. */
  receiveVolume(id: string, sent: VolumeSent, signal: AbortSignal) {
    return this.#call("POST", `/v1/volumes/${enc(id)}/receive`, sent, NodeVolume, signal, 30 * 60_000);
  }
  /** Base of the volume's content routes (volume-wire.ts), which the API forwards to as they are. */
  volumeUrl(id: string): URL {
    return new URL(`${this.baseUrl}/v1/volumes/${enc(id)}`);
  }
  proxyUrl(id: string, port: number): URL {
    return new URL(`${this.baseUrl}/v1/sandboxes/${enc(id)}/proxy/${port}`);
  }

  async #call<T>(
    method: string,
    path: string,
    body: unknown,
    schema: z.ZodType<T> | null,
    signal: AbortSignal,
    timeoutMs = this.#timeoutMs,
  ): Promise<T> {
    // The route's shape, not its ids, names the span (bounded names for trace backends).
    const route = path.replace(/\?.*$/, "").replace(/\/[a-z0-9]{20}(?=\/|$)/g, "/:id");
    return inChildSpan(`substrate ${method} ${route}`, "substrate", { "server.address": this.baseUrl, "http.request.method": method }, () =>
      this.#send(method, path, body, schema, signal, timeoutMs),
      SpanKind.CLIENT,
    );
  }

  async #send<T>(method: string, path: string, body: unknown, schema: z.ZodType<T> | null, signal: AbortSignal, timeoutMs: number): Promise<T> {
    const url = this.baseUrl + path;
    let status: number;
    let text: string;
    try {
      const res: Dispatcher.ResponseData = await request(url, {
        method: method as Dispatcher.HttpMethod,
        headers: withTraceHeaders({
          ...this.authHeaders(),
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        }),
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
        dispatcher: nodeDispatcher,
      });
      status = res.statusCode;
      text = await res.body.text();
    } catch (e) {
      if (signal.aborted) throw new SpaceError("canceled", `node call ${method} ${path} canceled`, { cause: e });
      if (e instanceof Error && e.name === "TimeoutError") {
        throw new SpaceError("deadline_exceeded", `node ${this.baseUrl} did not answer ${method} ${path} within ${timeoutMs} ms`, { cause: e });
      }
      throw unavailable(`node ${this.baseUrl} unreachable for ${method} ${path}: ${(e as Error).message}`, e);
    }
    if (status < 200 || status > 299) throw toNodeError(status, text, `${method} ${path}`);
    if (schema === null) return undefined as T;
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch (e) {
      throw new SpaceError("internal", `node answered ${method} ${path} with non-JSON: ${text.slice(0, 200)}`, { cause: e });
    }
    const r = schema.safeParse(json);
    if (!r.success) throw new SpaceError("internal", `node answered ${method} ${path} with an unexpected body: ${r.error.message.slice(0, 300)}`);
    return r.data;
  }
}

/**
 * A node's error body keeps its code; otherwise the HTTP status decides. A node's `internal`
 * is a failure it did not classify (its text names host paths, commands, library errors):
 * it stays unclassified, so the edges answer INTERNAL_MESSAGE and only the log has the text.
 */
export function toNodeError(status: number, text: string, what: string): SpaceError {
  try {
    const r = NodeError.safeParse(JSON.parse(text));
    if (r.success) {
      const code = (errorCodes as readonly string[]).includes(r.data.code) ? (r.data.code as ErrorCode) : fromHttpStatus(status);
      return new SpaceError(code, r.data.message, { unclassified: code === "internal" });
    }
  } catch {
    /* not JSON */
  }
  return new SpaceError(fromHttpStatus(status), `node ${what} failed with HTTP ${status}: ${text.slice(0, 300)}`);
}

const enc = encodeURIComponent;
