import { test } from "node:test";
import assert from "node:assert/strict";
import { renderPod, requiredTerms, cpuQuantity, type PodRenderInput, type PodRendered } from "./pod.ts";
import { podNameOf, toLabelValue, parseRefusalMarker, refusalMarker } from "../../kube/names.ts";
import { environmentLabel } from "../../contract/execution-environment.ts";
import type { EnvironmentBinding } from "../placement.ts";

const ENV = `sha256:${"ab12".repeat(16)}`;
const bound: EnvironmentBinding = { kind: "bound", environment: ENV, source: "release" };
const base: PodRenderInput = {
  namespace: "space-sandboxes",
  sandboxId: "i3x8kq0v2abc",
  templateId: "base",
  vcpu: 2,
  memoryMib: 512,
  diskMib: 1024,
};
const variants: Array<[string, PodRenderInput]> = [
  ["plain", base],
  ["group+selector", { ...base, nodeGroup: "gpu", nodeSelector: { zone: "a", disk: "ssd" } }],
  ["shortlist", { ...base, shortlist: ["n1", "n2", "n3"] }],
  ["pinned", { ...base, nodeGroup: "g", shortlist: ["n1"] }],
  ["fractional", { ...base, vcpu: 0.5 }],
];

test("pod: runtime class, requests incl. network slot, toleration, labels and annotations", () => {
  const { pod } = renderPod({ ...base, nodeGroup: "g", nodeSelector: { zone: "a" } }, "off");
  assert.equal(pod.metadata.name, "sbx-i3x8kq0v2abc");
  assert.equal(pod.metadata.namespace, "space-sandboxes");
  assert.equal(pod.metadata.labels["space.dev/sandbox"], "i3x8kq0v2abc");
  assert.equal(pod.metadata.annotations["space.dev/sandbox-id"], "i3x8kq0v2abc");
  assert.equal(pod.metadata.annotations["space.dev/template"], "base");
  assert.equal(pod.metadata.annotations["space.dev/environment"], undefined);
  assert.equal(pod.spec.runtimeClassName, "space");
  const r = pod.spec.containers[0]!.resources;
  assert.deepEqual(r.requests, { cpu: "2", memory: "512Mi", "ephemeral-storage": "1024Mi", "space.dev/network-slots": "1" });
  assert.deepEqual(r.limits, { "space.dev/network-slots": "1" });
  assert.deepEqual(pod.spec.tolerations, [{ key: "space.dev/node", operator: "Exists", effect: "NoSchedule" }]);
  assert.deepEqual(requiredTerms(pod), [
    {
      matchExpressions: [
        { key: "space.dev/node", operator: "In", values: ["true"] },
        { key: "space.dev/node-group", operator: "In", values: ["g"] },
        { key: "zone", operator: "In", values: ["a"] },
      ],
    },
  ]);
});

test("gate off renders no environment, even for bound work", () => {
  for (const [name, input] of variants) {
    const { pod } = renderPod({ ...input, environment: bound }, "off");
    const json = JSON.stringify(pod);
    assert.ok(!json.includes("env-sha256") && !json.includes(ENV), name);
  }
});

const bindings: EnvironmentBinding[] = [bound, { kind: "none" }, { kind: "unreadable", reason: "x" }];

test("gate shadow: exactly off's PodSpec byte for byte, plus the annotation", () => {
  for (const [name, input] of variants) {
    for (const environment of bindings) {
      const off: PodRendered = renderPod({ ...input, environment }, "off").pod;
      const shadow: PodRendered = renderPod({ ...input, environment }, "shadow").pod;
      assert.equal(JSON.stringify(shadow.spec), JSON.stringify(off.spec), `${name} ${environment.kind}`);
      const { ["space.dev/environment"]: ann, ...rest } = shadow.metadata.annotations;
      assert.equal(JSON.stringify({ ...shadow.metadata, annotations: rest }), JSON.stringify(off.metadata));
      assert.equal(ann, environment.kind === "bound" ? ENV : undefined, name);
    }
  }
});

test("gate shadow: an unreadable binding is placed as off and reported", () => {
  const r = renderPod({ ...base, environment: { kind: "unreadable", reason: "bad digest" } }, "shadow");
  assert.match(r.warnings.join(), /bad digest/);
});

test("gate on: the environment label in every required term, shortlists included", () => {
  const label = environmentLabel(ENV);
  assert.match(label, /^space\.dev\/env-sha256-[0-9a-f]{12}$/);
  for (const [name, input] of variants) {
    const { pod } = renderPod({ ...input, environment: bound }, "on");
    const terms = requiredTerms(pod);
    assert.equal(terms.length, input.shortlist?.length ?? 1, name);
    for (const t of terms) assert.ok(t.matchExpressions!.some((e) => e.key === label && e.operator === "In" && e.values![0] === "usable"), name);
    assert.equal(pod.metadata.annotations["space.dev/environment"], ENV);
    // The shortlist names one node per term.
    if (input.shortlist) assert.deepEqual(terms.map((t) => t.matchFields![0]!.values![0]), [...input.shortlist]);
  }
  // Unbound work requires no environment, whatever the gate.
  assert.ok(!JSON.stringify(renderPod(base, "on").pod.spec).includes("env-sha256"));
});

test("gate on: an unreadable binding refuses before any pod exists", () => {
  assert.throws(() => renderPod({ ...base, environment: { kind: "unreadable", reason: "gone" } }, "on"), (e: { code?: string }) => e.code === "failed_precondition");
});

test("names: pod names are DNS labels and distinct for distinct ids; markers parse", () => {
  assert.equal(podNameOf("abc"), "sbx-abc");
  const a = podNameOf("Sandbox_ID.1");
  const b = podNameOf("sandbox-id-1");
  assert.match(a, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  assert.notEqual(a, b);
  assert.ok(podNameOf("x".repeat(200)).length <= 63);
  assert.equal(toLabelValue("-a/b-"), "a-b");
  assert.equal(parseRefusalMarker(`disk too small ${refusalMarker("InvalidArgument")}`), "InvalidArgument");
  assert.equal(parseRefusalMarker("no marker"), null);
  assert.equal(cpuQuantity(0.25), "250m");
});
