/**
 * The Kubernetes API as SPACE uses it: a few typed calls over `@kubernetes/client-node`
 * and one `watch` primitive. Both the control plane (KubernetesSubstrate) and the node
 * agent (src/node/kubelet) go through `KubeApi`, so tests can record every call (e.g.
 * prove each event read is a watch from resource version "0").
 *
 * src/kube/ (client, names, object shapes) sits below both sides rather than in
 * substrate/kubernetes or node/kubelet: it is an adapter to one external API, like blob/,
 * and neither side owns it. It imports only core/.
 */
import * as k8s from "@kubernetes/client-node";
import { Agent, fetch as undiciFetch } from "undici";
import { SpaceError, errorCodes, type ErrorCode } from "../core/errors.ts";

export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
export interface WatchEvent<T = unknown> {
  type: WatchEventType;
  object: T;
}

/** A watch that failed; `status` is the HTTP status (or a Status object's code for ERROR events). */
export class WatchError extends Error {
  readonly status: number | undefined;
  constructor(message: string, status: number | undefined) {
    super(message);
    this.name = "WatchError";
    this.status = status;
  }
}

export interface KubeApi {
  /**
   * Opens one watch on `path` (a collection URL) with `query`; calls `onEvent` for each
   * event; resolves when the server ends it, rejects with WatchError when it fails or an
   * ERROR event arrives. Aborting `signal` ends it (resolves).
   */
  watch<T>(path: string, query: Record<string, string>, onEvent: (e: WatchEvent<T>) => void, signal: AbortSignal): Promise<void>;
  /** JSON request against the API; rejects with KubeError. */
  request<T>(method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE", path: string, opts?: RequestOpts): Promise<T>;
}

export interface RequestOpts {
  body?: unknown;
  query?: Record<string, string>;
  /** PATCH content type: merge (default), strategic, apply (server-side apply), json. */
  patch?: "merge" | "strategic" | "apply" | "json";
  signal?: AbortSignal;
}

/** A failed API call: HTTP status, the Status reason and message. */
export class KubeError extends Error {
  readonly status: number;
  readonly reason: string;
  constructor(status: number, reason: string, message: string) {
    super(message);
    this.name = "KubeError";
    this.status = status;
    this.reason = reason;
  }
}

export const isNotFound = (e: unknown) => e instanceof KubeError && e.status === 404;
export const isConflict = (e: unknown) => e instanceof KubeError && e.status === 409;

const patchTypes = {
  merge: "application/merge-patch+json",
  strategic: "application/strategic-merge-patch+json",
  apply: "application/apply-patch+yaml",
  json: "application/json-patch+json",
} as const;

/** How to reach the apiserver: a kubeconfig file, in-cluster, or a URL + token + CA. */
export type KubeConnection =
  | { kind: "kubeconfig"; path: string; context?: string }
  | { kind: "in-cluster" }
  | { kind: "token"; server: string; token: string; caFile?: string; insecure?: boolean };

export function kubeConfigOf(c: KubeConnection): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  switch (c.kind) {
    case "kubeconfig":
      kc.loadFromFile(c.path);
      if (c.context) kc.setCurrentContext(c.context);
      break;
    case "in-cluster":
      kc.loadFromCluster();
      break;
    case "token":
      kc.loadFromOptions({
        clusters: [{ name: "space", server: c.server, ...(c.caFile ? { caFile: c.caFile } : {}), skipTLSVerify: c.insecure ?? false }],
        users: [{ name: "space", token: c.token }],
        contexts: [{ name: "space", cluster: "space", user: "space" }],
        currentContext: "space",
      });
      break;
  }
  return kc;
}

/** SPACE_KUBE_CONFIG: a kubeconfig file, or empty for the in-cluster service account. */
export function kubeConnectionOf(config: { SPACE_KUBE_CONFIG: string }): KubeConnection {
  return config.SPACE_KUBE_CONFIG ? { kind: "kubeconfig", path: config.SPACE_KUBE_CONFIG } : { kind: "in-cluster" };
}

/** `KubeApi` over client-node's KubeConfig (TLS, auth) and its Watch. */
export function createKubeApi(conn: KubeConnection | k8s.KubeConfig): KubeApi {
  const kc = conn instanceof k8s.KubeConfig ? conn : kubeConfigOf(conn);
  const watcher = new k8s.Watch(kc);
  let dispatcher: Agent | undefined;
  const server = () => {
    const c = kc.getCurrentCluster();
    if (!c) throw new SpaceError("invalid_argument", "the kubeconfig has no current cluster");
    return c.server.replace(/\/+$/, "");
  };
  return {
    async watch<T>(path: string, query: Record<string, string>, onEvent: (e: WatchEvent<T>) => void, signal: AbortSignal): Promise<void> {
      if (signal.aborted) return;
      await new Promise<void>((resolve, reject) => {
        let controller: AbortController | undefined;
        let finished = false;
        const finish = (err: unknown) => {
          if (finished) return;
          finished = true;
          signal.removeEventListener("abort", onAbort);
          controller?.abort();
          if (err && !signal.aborted) reject(err);
          else resolve();
        };
        const onAbort = () => finish(null);
        signal.addEventListener("abort", onAbort, { once: true });
        watcher
          .watch(
            path,
            query,
            (type: string, object: unknown) => {
              if (finished) return;
              if (type === "ERROR") {
                const st = object as { code?: number; message?: string };
                finish(new WatchError(st.message ?? "watch error", st.code));
                return;
              }
              try {
                onEvent({ type: type as WatchEventType, object: object as T });
              } catch (e) {
                finish(e);
              }
            },
            (err: unknown) => {
              if (!err) return finish(null);
              const status = (err as { statusCode?: number }).statusCode;
              finish(new WatchError(err instanceof Error ? err.message : String(err), status));
            },
          )
          .then(
            (c) => {
              controller = c;
              if (finished) c.abort();
            },
            (e: unknown) => finish(new WatchError(e instanceof Error ? e.message : String(e), undefined)),
          );
      });
    },

    async request<T>(method: string, path: string, opts: RequestOpts = {}): Promise<T> {
      const url = new URL(server() + path);
      for (const [k, v] of Object.entries(opts.query ?? {})) url.searchParams.set(k, v);
      // TLS material and auth headers from the kubeconfig (per call: tokens may rotate).
      const https: import("node:https").RequestOptions = {};
      await kc.applyToHTTPSOptions(https);
      dispatcher ??= new Agent({
        connect: {
          ...(https.ca ? { ca: https.ca } : {}),
          ...(https.cert ? { cert: https.cert } : {}),
          ...(https.key ? { key: https.key } : {}),
          rejectUnauthorized: https.rejectUnauthorized !== false,
        },
      });
      const headers: Record<string, string> = { accept: "application/json" };
      for (const [k, v] of Object.entries(https.headers ?? {})) if (typeof v === "string") headers[k.toLowerCase()] = v;
      if (opts.body !== undefined) headers["content-type"] = method === "PATCH" ? patchTypes[opts.patch ?? "merge"] : "application/json";
      const res = await undiciFetch(url, {
        method,
        headers,
        dispatcher,
        ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
        ...(opts.signal ? { signal: opts.signal } : {}),
      });
      const text = await res.text();
      const isJson = (res.headers.get("content-type") ?? "").includes("json");
      const json = text && isJson ? (JSON.parse(text) as unknown) : text || undefined;
      if (!res.ok) {
        const st = (isJson ? json : {}) as { reason?: string; message?: string };
        throw new KubeError(res.status, st.reason ?? "", st.message ?? `${method} ${path}: HTTP ${res.status}`);
      }
      return json as T;
    },
  } as KubeApi;
}

/** `InvalidArgument` ↔ `invalid_argument` (the marker uses Connect's code names). */
export function markerCodeOf(code: ErrorCode): string {
  return code
    .split("_")
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join("");
}
export function errorCodeOfMarker(marker: string): ErrorCode | null {
  const snake = marker.replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
  const codes: readonly string[] = errorCodes;
  return codes.includes(snake) ? (snake as ErrorCode) : null;
}
