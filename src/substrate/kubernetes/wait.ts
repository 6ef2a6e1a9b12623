/**
 * Waiting for a sandbox pod, by watch only (behaviours.md B): a watch on the pod (until
 * `until` accepts it) and, concurrently, a watch on its `FailedCreatePodSandBox` events
 * (field selector on the pod's UID and the reason) from resource version "0", so the
 * apiserver replays what was recorded before the watch opened and pushes the rest.
 *
 * - A refusal marked `[space-err=InvalidArgument]` ends the wait at once: invalid_argument
 *   (400 / invalid_request) with the node's message.
 * - Other refusals are remembered and the wait goes on to the deadline (a node may retry,
 *   as kubelet does); the deadline error names the last one.
 * - A watch that ends, or fails with a timeout, 429, 410 (expired) or a network error, is
 *   re-opened a second later.
 * - An events watch the apiserver refuses outright (401/403/404/405: no permission) stops;
 *   the wait falls back to the deadline, with one warning per substrate.
 */
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { errorCodeOfMarker, WatchError, type KubeApi, type WatchEvent } from "../../kube/kube-api.ts";
import { REFUSAL_REASON, parseRefusalMarker } from "../../kube/names.ts";
import type { EventObject, PodObject } from "../../kube/objects.ts";

export interface WaitForPodOptions<T> {
  kube: KubeApi;
  namespace: string;
  podName: string;
  podUid: string;
  /** Returns a value when the pod is where the caller wants it; throws to fail the wait. */
  until: (pod: PodObject) => T | undefined;
  deadlineMs: number;
  /** The pod's last state in words, for the deadline message (e.g. the scheduler's reason). */
  describe?: (pod: PodObject) => string | undefined;
  /** What is being waited for, for the deadline message ("its IP", "a node"). */
  what: string;
  /** Re-open delay after a watch ends or fails (1 s; tests shorten it). */
  reopenMs?: number;
  log: Logger;
  /** Called once when the events watch is refused outright (the substrate logs one warning). */
  onEventsRefused?: (err: WatchError) => void;
  signal: AbortSignal;
}

/** Statuses after which a watch is not re-opened (no permission, no such resource). */
const refusedStatuses = new Set([401, 403, 404, 405]);

export const eventsFieldSelector = (uid: string) => `involvedObject.uid=${uid},reason=${REFUSAL_REASON}`;

export async function waitForPod<T>(o: WaitForPodOptions<T>): Promise<T> {
  const reopenMs = o.reopenMs ?? 1000;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  o.signal.addEventListener("abort", onAbort, { once: true });
  let lastRefusal: string | undefined;
  let lastState: string | undefined;
  let settle!: { resolve: (v: T) => void; reject: (e: unknown) => void };
  const result = new Promise<T>((resolve, reject) => (settle = { resolve, reject }));
  let done = false;
  const finish = (f: () => void) => {
    if (done) return;
    done = true;
    f();
    stop.abort();
  };
  const timer = setTimeout(
    () =>
      finish(() =>
        settle.reject(
          new SpaceError(
            "deadline_exceeded",
            `pod ${o.namespace}/${o.podName} did not get ${o.what} within ${Math.round(o.deadlineMs / 1000)} s` +
              (lastRefusal ? `; the node refused it: ${lastRefusal}` : "") +
              (lastState ? `; ${lastState}` : ""),
            { retryable: true },
          ),
        ),
      ),
    o.deadlineMs,
  );
  stop.signal.addEventListener("abort", () => {
    clearTimeout(timer);
    if (o.signal.aborted) finish(() => settle.reject(new SpaceError("canceled", `wait for pod ${o.podName} canceled`)));
  });

  const onPod = (e: WatchEvent<PodObject>) => {
    const pod = e.object;
    if (pod.metadata?.uid !== o.podUid) return; // an older pod of the same name
    if (e.type === "DELETED") {
      finish(() => settle.reject(new SpaceError("unavailable", `pod ${o.namespace}/${o.podName} was deleted while waiting for ${o.what}`)));
      return;
    }
    lastState = o.describe?.(pod) ?? lastState;
    let v: T | undefined;
    try {
      v = o.until(pod);
    } catch (err) {
      finish(() => settle.reject(err));
      return;
    }
    if (v !== undefined) finish(() => settle.resolve(v));
  };
  const onEvent = (e: WatchEvent<EventObject>) => {
    if (e.type === "DELETED" || e.type === "BOOKMARK") return;
    const ev = e.object;
    if (ev.involvedObject?.uid !== o.podUid || ev.reason !== REFUSAL_REASON) return;
    const msg = ev.message ?? "";
    const marker = parseRefusalMarker(msg);
    const code = marker ? errorCodeOfMarker(marker) : null;
    lastRefusal = msg;
    if (code === "invalid_argument") {
      const clean = msg.replace(/\s*\[space-err=[A-Za-z]+\]\s*/, " ").trim();
      finish(() => settle.reject(new SpaceError("invalid_argument", clean)));
    } else {
      o.log.info({ pod: o.podName, refusal: msg }, "node refused the pod; waiting for a retry until the deadline");
    }
  };

  const loop = async <E>(name: string, path: string, query: Record<string, string>, handler: (e: WatchEvent<E>) => void, onRefused: (e: WatchError) => void) => {
    while (!stop.signal.aborted) {
      try {
        await o.kube.watch<E>(path, query, handler, stop.signal);
      } catch (e) {
        if (e instanceof WatchError && e.status !== undefined && refusedStatuses.has(e.status)) {
          onRefused(e);
          return;
        }
        o.log.debug({ watch: name, err: e }, "watch failed; re-opening");
      }
      if (stop.signal.aborted) return;
      await sleep(reopenMs, stop.signal);
    }
  };

  const ns = encodeURIComponent(o.namespace);
  // Events first: a refusal recorded before the wait began is replayed before the pod's state.
  void loop<EventObject>(
    "events",
    `/api/v1/namespaces/${ns}/events`,
    { fieldSelector: eventsFieldSelector(o.podUid), resourceVersion: "0" },
    onEvent,
    (e) => o.onEventsRefused?.(e),
  );
  void loop<PodObject>(
    "pod",
    `/api/v1/namespaces/${ns}/pods`,
    { fieldSelector: `metadata.name=${o.podName}`, resourceVersion: "0" },
    onPod,
    (e) => finish(() => settle.reject(new SpaceError("unavailable", `cannot watch pod ${o.podName}: ${e.message} (HTTP ${e.status})`))),
  );
  try {
    return await result;
  } finally {
    o.signal.removeEventListener("abort", onAbort);
    stop.abort();
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
