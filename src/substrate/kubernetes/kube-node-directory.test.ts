import { test } from "node:test";
import assert from "node:assert/strict";
import type { KubeApi } from "../../kube/kube-api.ts";
import { KubeNodeDirectory, nodeEntryOf, type KubeNodeObject } from "./kube-node-directory.ts";

const now = Date.parse("2026-01-01T00:01:00Z");
const node = (over: { ready?: string; beat?: string; unschedulable?: boolean; annotations?: Record<string, string> } = {}): KubeNodeObject => ({
  metadata: {
    name: "n1",
    labels: { "space.dev/node": "true", "space.dev/node-group": "g1", zone: "a" },
    annotations: { "space.dev/node-api": "http://10.0.0.1:3002", "space.dev/usable-environments": '["sha256:aa"]', "space.dev/templates": '["base"]', ...over.annotations },
  },
  spec: { unschedulable: over.unschedulable ?? false },
  status: { conditions: [{ type: "Ready", status: over.ready ?? "True", lastHeartbeatTime: over.beat ?? "2026-01-01T00:00:50Z" }] },
});

test("node directory: a Node as a node entry (status from Ready, heartbeat age and cordon; environments and templates from annotations)", () => {
  const e = nodeEntryOf(node(), now)!;
  assert.deepEqual(
    { id: e.id, url: e.url, status: e.status, group: e.nodeGroup, envs: e.usableEnvironments, templates: e.templates, zone: e.labels.zone },
    { id: "n1", url: "http://10.0.0.1:3002", status: "ready", group: "g1", envs: ["sha256:aa"], templates: ["base"], zone: "a" },
  );
  assert.equal(nodeEntryOf(node({ ready: "False" }), now)!.status, "unavailable");
  assert.equal(nodeEntryOf(node({ beat: "2026-01-01T00:00:10Z" }), now)!.status, "unavailable", "a stale heartbeat");
  assert.equal(nodeEntryOf(node({ unschedulable: true }), now)!.status, "draining");
  assert.deepEqual(nodeEntryOf(node({ annotations: { "space.dev/usable-environments": "{not json" } }), now)!.usableEnvironments, []);
  assert.equal(nodeEntryOf({ metadata: { name: "x" } }, now), null, "no node-api annotation: not a SPACE node");
});

test("node directory: one LIST serves calls within the TTL; a failed LIST is not cached", async () => {
  let calls = 0;
  let fail = false;
  const kube = {
    async request() {
      calls++;
      if (fail) throw new Error("apiserver down");
      return { items: [node({ beat: new Date().toISOString() })] };
    },
  } as unknown as KubeApi;
  const dir = new KubeNodeDirectory(kube, 60_000);
  const signal = AbortSignal.timeout(1000);
  assert.equal((await dir.list(signal)).length, 1);
  await dir.list(signal);
  assert.equal(calls, 1);
  const failing = new KubeNodeDirectory(kube, 60_000);
  fail = true;
  await assert.rejects(failing.list(signal), /apiserver down/);
  fail = false;
  assert.equal((await failing.list(signal)).length, 1);
  assert.equal(calls, 3);
});
