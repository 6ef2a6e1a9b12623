import { test } from "node:test";
import assert from "node:assert/strict";
import { createLogger } from "../../core/log.ts";
import { WatchError, type KubeApi, type WatchEvent } from "../../kube/kube-api.ts";
import { waitForPod } from "./wait.ts";
import type { PodObject } from "../../kube/objects.ts";
import { podReady } from "./kubernetes-substrate.ts";

const log = createLogger("silent", "test");
const UID = "uid-1";

/** A scripted KubeApi: each watch call takes the next script for its path kind. */
function fakeKube(scripts: { pods: Array<(emit: (e: WatchEvent) => void) => Promise<void>>; events: Array<(emit: (e: WatchEvent) => void) => Promise<void>> }) {
  const calls: Array<{ path: string; query: Record<string, string> }> = [];
  const kube: KubeApi = {
    async watch<T>(path: string, query: Record<string, string>, onEvent: (e: WatchEvent<T>) => void, signal: AbortSignal) {
      calls.push({ path, query });
      const list = path.endsWith("/events") ? scripts.events : scripts.pods;
      const s = list.shift();
      if (!s) return new Promise<void>((r) => signal.addEventListener("abort", () => r(), { once: true }));
      return s(onEvent as (e: WatchEvent) => void);
    },
    async request() {
      throw new Error("no requests in this test");
    },
  };
  return { kube, calls };
}
const pod = (status: PodObject["status"]): WatchEvent => ({ type: "MODIFIED", object: { metadata: { name: "sbx-a", uid: UID }, status } });
const refusal = (message: string): WatchEvent => ({
  type: "ADDED",
  object: { involvedObject: { uid: UID }, reason: "FailedCreatePodSandBox", message },
});
const base = { namespace: "ns", podName: "sbx-a", podUid: UID, until: podReady, what: "its IP", reopenMs: 10, log };

test("wait: resolves on IP + Ready; events watched from RV 0 with the uid+reason field selector", async () => {
  const { kube, calls } = fakeKube({
    pods: [async (emit) => emit(pod({ phase: "Running", podIP: "10.0.0.2", conditions: [{ type: "Ready", status: "True" }] }))],
    events: [],
  });
  const r = await waitForPod({ ...base, kube, deadlineMs: 5000, signal: AbortSignal.timeout(5000) });
  assert.equal(r, true);
  const ev = calls.filter((c) => c.path.endsWith("/events"));
  assert.ok(ev.length >= 1);
  for (const c of ev) assert.deepEqual(c.query, { fieldSelector: `involvedObject.uid=${UID},reason=FailedCreatePodSandBox`, resourceVersion: "0" });
});

test("wait: an InvalidArgument refusal ends the wait with invalid_argument at once", async () => {
  const { kube } = fakeKube({ pods: [], events: [async (emit) => emit(refusal("rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB [space-err=InvalidArgument]"))] });
  const t0 = Date.now();
  await assert.rejects(waitForPod({ ...base, kube, deadlineMs: 60_000, signal: AbortSignal.timeout(60_000) }), (e: { code: string; message: string }) => {
    assert.equal(e.code, "invalid_argument");
    assert.equal(e.message, "rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB");
    return true;
  });
  assert.ok(Date.now() - t0 < 2000);
});

test("wait: other refusals wait for the deadline, which names the last one", async () => {
  const { kube } = fakeKube({ pods: [], events: [async (emit) => emit(refusal("no slot [space-err=ResourceExhausted]"))] });
  await assert.rejects(waitForPod({ ...base, kube, deadlineMs: 300, signal: AbortSignal.timeout(5000) }), (e: { code: string; message: string }) => {
    assert.equal(e.code, "deadline_exceeded");
    assert.match(e.message, /no slot/);
    return true;
  });
});

test("wait: watches that end or fail with 429/410/timeouts are re-opened (still from RV 0)", async () => {
  const { kube, calls } = fakeKube({
    pods: [async () => {}, async () => Promise.reject(new WatchError("expired", 410)), async (emit) => emit(pod({ podIP: "10.0.0.3", conditions: [{ type: "Ready", status: "True" }] }))],
    events: [async () => Promise.reject(new WatchError("too many", 429)), async () => Promise.reject(new WatchError("timeout", undefined)), async (emit) => emit(refusal("x [space-err=InvalidArgument]"))],
  });
  // The refusal arrives on the third events watch, the IP on the third pod watch: either may win; both re-opened twice.
  await waitForPod({ ...base, kube, deadlineMs: 5000, signal: AbortSignal.timeout(5000) }).catch(() => {});
  const ev = calls.filter((c) => c.path.endsWith("/events"));
  const pods = calls.filter((c) => c.path.endsWith("/pods"));
  assert.ok(ev.length >= 3 || pods.length >= 3, JSON.stringify(calls));
  for (const c of [...ev, ...pods]) assert.equal(c.query.resourceVersion, "0");
});

test("wait: an events watch refused outright falls back to the deadline with one callback", async () => {
  let refused = 0;
  const { kube, calls } = fakeKube({ pods: [], events: [async () => Promise.reject(new WatchError("forbidden", 403))] });
  await assert.rejects(
    waitForPod({ ...base, kube, deadlineMs: 300, onEventsRefused: () => refused++, signal: AbortSignal.timeout(5000) }),
    (e: { code: string }) => e.code === "deadline_exceeded",
  );
  assert.equal(refused, 1);
  assert.equal(calls.filter((c) => c.path.endsWith("/events")).length, 1);
});

test("wait: a Failed pod (under its refusal marker's code) or a deleted one ends the wait", async () => {
  const a = fakeKube({ pods: [async (emit) => emit(pod({ phase: "Failed", message: "boom" }))], events: [] });
  await assert.rejects(waitForPod({ ...base, kube: a.kube, deadlineMs: 5000, signal: AbortSignal.timeout(5000) }), (e: { code: string; message: string }) => e.code === "unavailable" && /boom/.test(e.message));
  // Failed with the refusal's marker before its event arrived: the marker's code, message without the marker.
  const m = fakeKube({ pods: [async (emit) => emit(pod({ phase: "Failed", message: "rootfs_size_mb=300 is smaller than 451 MiB [space-err=InvalidArgument]" }))], events: [] });
  await assert.rejects(
    waitForPod({ ...base, kube: m.kube, deadlineMs: 5000, signal: AbortSignal.timeout(5000) }),
    (e: { code: string; message: string }) => e.code === "invalid_argument" && /rootfs_size_mb=300 is smaller than 451 MiB$/.test(e.message),
  );
  const b = fakeKube({ pods: [async (emit) => emit({ type: "DELETED", object: { metadata: { uid: UID } } })], events: [] });
  await assert.rejects(waitForPod({ ...base, kube: b.kube, deadlineMs: 5000, signal: AbortSignal.timeout(5000) }), /deleted/);
});
