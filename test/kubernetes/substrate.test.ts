/**
 * The Kubernetes substrate against a real kube-apiserver + kube-scheduler (+ etcd), with
 * the node side played by the real VirtualKubelet over an in-memory sandbox manager and
 * a minimal node-api (the runtime itself is covered by the node suites).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join, resolve } from "node:path";
import { KubernetesObjectApi, loadAllYaml } from "@kubernetes/client-node";
import { loadConfig } from "../../src/core/config.ts";
import type { AddressInfo } from "node:net";
import { SpaceError } from "../../src/core/errors.ts";
import { createLogger } from "../../src/core/log.ts";
import type { NodeInventory, SandboxSpec, SandboxStatus } from "../../src/contract/node-api.ts";
import { VirtualKubelet, type VirtualKubeletDeps } from "../../src/node/kubelet/virtual-kubelet.ts";
import { environmentLabel } from "../../src/contract/execution-environment.ts";
import { createKubeApi, kubeConfigOf, type KubeApi } from "../../src/kube/kube-api.ts";
import { KubernetesSubstrate } from "../../src/substrate/kubernetes/kubernetes-substrate.ts";
import { kubeLeaseBackend } from "../../src/substrate/kubernetes/lease.ts";
import { KubeNodeDirectory } from "../../src/substrate/kubernetes/kube-node-directory.ts";
import { computeCensus } from "../../src/controller/census.ts";
import { startLeaderElection } from "../../src/store/leader.ts";
import { podNameOf } from "../../src/kube/names.ts";
import { k8sSkipReason, startCluster, type TestCluster } from "./cluster.ts";
import { waitFor } from "../support/stack.ts";

const log = createLogger(process.env.SPACE_TEST_LOG ?? "silent", "test");
const skip = k8sSkipReason;
const TOKEN = "node-token";
const ENV_A = `sha256:${"a".repeat(64)}`;
const ENV_B = `sha256:${"b".repeat(64)}`;
const NODE = "0b0e6a5e-0000-4000-8000-000000000001";
const DEPLOY = resolve(import.meta.dirname, "..", "..", "deploy");

let cluster: TestCluster;
let nodeApi: Server;
let kubelet: VirtualKubelet;
const sandboxes = new Map<string, SandboxStatus>();
let refusal: SpaceError | undefined;
let envs: string[] = [ENV_A];
let inventoryFails = false;

function inventory(): NodeInventory {
  if (inventoryFails) throw new Error("inventory unavailable");
  return {
    nodeId: NODE,
    name: "test-node",
    runtime: "runc",
    capacity: { networkSlots: 10, vcpu: 2, memoryMib: 4096, diskMib: 10_240 },
    used: { networkSlots: sandboxes.size, vcpu: 0, memoryMib: 0, diskMib: 0, sandboxes: sandboxes.size },
    usableEnvironments: envs,
    templates: [],
  } as NodeInventory;
}

const manager = {
  list: () => [...sandboxes.values()],
  async create(spec: SandboxSpec): Promise<SandboxStatus> {
    if (refusal) throw refusal;
    const st: SandboxStatus = {
      sandboxId: spec.sandboxId,
      executionId: spec.executionId,
      template: spec.template,
      state: "running",
      address: `10.77.0.${sandboxes.size + 2}`,
      vcpu: spec.vcpu,
      memoryMib: spec.memoryMib,
      diskMib: spec.diskMib,
      startedAt: new Date().toISOString(),
    };
    sandboxes.set(spec.sandboxId, st);
    return st;
  },
  async kill(id: string) {
    sandboxes.delete(id);
  },
};

/** Records every watch and request (to prove how events are read). */
function recording(kube: KubeApi) {
  const watches: Array<{ path: string; query: Record<string, string> }> = [];
  const requests: Array<{ method: string; path: string }> = [];
  const k: KubeApi = {
    watch(path, query, onEvent, signal) {
      watches.push({ path, query });
      return kube.watch(path, query, onEvent, signal);
    },
    request(method, path, opts) {
      requests.push({ method, path });
      return kube.request(method, path, opts);
    },
  };
  return { kube: k, watches, requests };
}

function substrate(kube: KubeApi, gate: "off" | "shadow" | "on" = "off", deadlineMs = 20_000) {
  return new KubernetesSubstrate({ kube, namespace: "space-sandboxes", internalToken: TOKEN, gate, scheduleDeadlineMs: deadlineMs, readinessDeadlineMs: deadlineMs, log });
}

const ACCESS_TOKEN = "envd-token-must-not-sit-on-the-pod-0123456789";
const spec = (sandboxId: string, diskMib = 1024): SandboxSpec =>
  ({ sandboxId, executionId: `ex_${sandboxId}`, template: "base", vcpu: 1, memoryMib: 256, diskMib, envVars: { SECRET_ENV: "s3cr3t-env-value" }, accessToken: ACCESS_TOKEN, allowInternetAccess: true }) as SandboxSpec;
const req = (sandboxId: string) => ({ sandboxId, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024 });

async function nodeLabels(): Promise<Record<string, string>> {
  const n = await cluster.kube.request<{ metadata: { labels?: Record<string, string> } }>("GET", `/api/v1/nodes/${NODE}`);
  return n.metadata.labels ?? {};
}

before(async () => {
  if (skip) return;
  cluster = await startCluster();
  nodeApi = createServer((rq, rs) => {
    const m = /^\/v1\/sandboxes\/([^/]+)$/.exec(rq.url ?? "");
    const st = m ? sandboxes.get(decodeURIComponent(m[1]!)) : undefined;
    if (rq.method === "DELETE" && m) {
      sandboxes.delete(decodeURIComponent(m[1]!));
      rs.writeHead(204).end();
    } else if (st) rs.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(st));
    else rs.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ code: "not_found", message: "no such sandbox" }));
  });
  await new Promise<void>((r) => nodeApi.listen(0, "127.0.0.1", r));
  const port = (nodeApi.address() as AddressInfo).port;
  kubelet = new VirtualKubelet({
    kube: cluster.kube,
    agent: { inventory: async () => inventory(), manager, snapshots: undefined } as unknown as VirtualKubeletDeps["agent"],
    identity: { name: NODE, nodeGroup: "default", labels: { zone: "a" }, nodeApiUrl: `http://127.0.0.1:${port}` },
    address: "127.0.0.1",
    version: "test",
    heartbeatMs: 60_000,
    log,
  });
  await kubelet.start();
});

after(async () => {
  if (skip) return;
  await kubelet?.stop();
  await new Promise((r) => nodeApi?.close(r));
  await cluster?.stop();
});

test("a sandbox pod is placed by kube-scheduler on the virtual node and runs (IP, Ready); its envd token is in a Secret it owns, not on the pod", { skip }, async () => {
  const s = substrate(cluster.kube);
  const t0 = Date.now();
  const ref = await s.place(req("k8srun10000000000000"), AbortSignal.timeout(30_000));
  assert.equal(ref.nodeId, NODE);
  const st = await s.start(ref, spec("k8srun10000000000000"), AbortSignal.timeout(30_000));
  assert.equal(st.sandboxId, "k8srun10000000000000");
  const pod = await cluster.kube.request<{ spec: { nodeName: string }; status: { podIP: string; phase: string; conditions: Array<{ type: string; status: string }> } }>(
    "GET",
    `/api/v1/namespaces/space-sandboxes/pods/${podNameOf("k8srun10000000000000")}`,
  );
  assert.equal(pod.spec.nodeName, NODE);
  assert.equal(pod.status.phase, "Running");
  assert.equal(pod.status.podIP, st.address);
  assert.ok(pod.status.conditions.some((c) => c.type === "Ready" && c.status === "True"));
  process.stdout.write(`# kubernetes create (API → pod bound → ready): ${Date.now() - t0} ms\n`);
  // The envd token and env vars live in a Secret owned by the pod, never on the pod.
  const podJson = JSON.stringify(await cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/pods/${podNameOf("k8srun10000000000000")}`));
  assert.ok(!podJson.includes(ACCESS_TOKEN) && !podJson.includes("s3cr3t-env-value"), podJson);
  const podObj = JSON.parse(podJson) as { metadata: { uid: string; annotations: Record<string, string> } };
  const secretName = podObj.metadata.annotations["space.dev/sandbox-spec-secret"]!;
  const secret = await cluster.kube.request<{ type: string; metadata: { ownerReferences: Array<{ kind: string; uid: string }> }; data: Record<string, string> }>(
    "GET",
    `/api/v1/namespaces/space-sandboxes/secrets/${secretName}`,
  );
  assert.equal(secret.type, "space.dev/sandbox-spec");
  assert.deepEqual(secret.metadata.ownerReferences.map((o) => [o.kind, o.uid]), [["Pod", podObj.metadata.uid]]);
  assert.equal((JSON.parse(Buffer.from(secret.data.spec!, "base64").toString()) as SandboxSpec).accessToken, ACCESS_TOKEN);
  await s.kill(ref, AbortSignal.timeout(30_000));
  assert.equal(sandboxes.has("k8srun10000000000000"), false);
  await assert.rejects(cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/pods/${podNameOf("k8srun10000000000000")}`), (e: { status?: number }) => e.status === 404);
  await assert.rejects(cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/secrets/${secretName}`), (e: { status?: number }) => e.status === 404, "the secret goes with the pod");
});

test("disk below the rootfs: 400 within seconds via the event watch (every event read a watch from RV 0 for that UID); the pod is deleted", { skip }, async () => {
  const rec = recording(cluster.kube);
  const s = substrate(rec.kube);
  refusal = new SpaceError("invalid_argument", "rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB");
  try {
    const ref = await s.place(req("k8sdisk1000000000000"), AbortSignal.timeout(30_000));
    const t0 = Date.now();
    await assert.rejects(s.start(ref, spec("k8sdisk1000000000000", 300), AbortSignal.timeout(60_000)), (e: SpaceError) => {
      assert.equal(e.code, "invalid_argument");
      assert.match(e.message, /rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB/);
      return true;
    });
    assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
  } finally {
    refusal = undefined;
  }
  // No event was ever read but by a watch from "0" with the uid+reason selector.
  assert.ok(!rec.requests.some((r) => r.path.includes("/events")), JSON.stringify(rec.requests));
  const ev = rec.watches.filter((w) => w.path.endsWith("/events"));
  assert.ok(ev.length >= 1);
  for (const w of ev) {
    assert.equal(w.query.resourceVersion, "0");
    assert.match(w.query.fieldSelector!, /^involvedObject\.uid=[0-9a-f-]{36},reason=FailedCreatePodSandBox$/);
  }
  await waitFor(
    () => cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/pods/${podNameOf("k8sdisk1000000000000")}`).then(() => undefined, (e: { status?: number }) => e.status === 404 || undefined),
    "the refused pod deleted",
    10_000,
  );
});

test("node labels by server-side apply: stopped labels disappear, empty removes all, unavailable changes nothing, others' labels stay", { skip }, async () => {
  const la = environmentLabel(ENV_A);
  const lb = environmentLabel(ENV_B);
  const signal = AbortSignal.timeout(10_000);
  await cluster.kube.request("PATCH", `/api/v1/nodes/${NODE}`, { body: { metadata: { labels: { "team.example/owner": "ops" } } }, patch: "merge" });
  await kubelet.applyLabels([ENV_A, ENV_B], signal);
  let l = await nodeLabels();
  assert.equal(l[la], "usable");
  assert.equal(l[lb], "usable");
  assert.equal(l.zone, "a");
  await kubelet.applyLabels([ENV_A], signal);
  l = await nodeLabels();
  assert.equal(l[la], "usable");
  assert.equal(l[lb], undefined);
  envs = [];
  await kubelet.heartbeat();
  l = await nodeLabels();
  assert.ok(!Object.keys(l).some((k) => k.startsWith("space.dev/env-")), JSON.stringify(l));
  envs = [ENV_B];
  await kubelet.heartbeat();
  inventoryFails = true;
  try {
    await kubelet.heartbeat();
  } finally {
    inventoryFails = false;
  }
  l = await nodeLabels();
  assert.equal(l[lb], "usable", "an unavailable inventory changes nothing");
  assert.equal(l["team.example/owner"], "ops", "labels of other field managers stay");
  assert.equal(l["space.dev/node"], "true");
  envs = [ENV_A];
  await kubelet.heartbeat();
});

test("gate on: a pod requiring an environment no node publishes stays unscheduled (deleted at the deadline); pinned restore → 409 before any pod", { skip }, async () => {
  const s = substrate(cluster.kube, "on", 3000);
  await assert.rejects(
    s.place({ ...req("k8senv10000000000000"), environment: { kind: "bound", environment: ENV_B, source: "test" } }, AbortSignal.timeout(30_000)),
    (e: SpaceError) => e.code === "deadline_exceeded",
  );
  await assert.rejects(cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/pods/${podNameOf("k8senv10000000000000")}`), (e: { status?: number }) => e.status === 404);
  // The node publishes ENV_A: a bound pod lands there.
  const ref = await substrate(cluster.kube, "on").place({ ...req("k8senv20000000000000"), environment: { kind: "bound", environment: ENV_A, source: "test" } }, AbortSignal.timeout(30_000));
  assert.equal(ref.nodeId, NODE);
  await s.kill(ref, AbortSignal.timeout(10_000));
  await assert.rejects(
    s.place({ ...req("k8senv30000000000000"), pinnedNodeId: NODE, environment: { kind: "bound", environment: ENV_B, source: "test" } }, AbortSignal.timeout(10_000)),
    (e: SpaceError) => e.code === "failed_precondition" && /drain the node/.test(e.message),
  );
  await assert.rejects(cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/pods/${podNameOf("k8senv30000000000000")}`), (e: { status?: number }) => e.status === 404);
});

test("controller leader election through a coordination.k8s.io Lease: one leader; a crashed one is replaced within 2 leases (epoch + 1); a stopped one hands over at once", { skip }, async () => {
  const backend = kubeLeaseBackend(cluster.kube, "space-sandboxes");
  const name = "space-controller-test";
  const leaseMs = 2000;
  const elected: string[] = [];
  const contender = (holder: string) =>
    startLeaderElection({ backend, name, holder, leaseMs, onElected: () => void elected.push(holder), onError: () => {} });
  const a = await contender("a");
  const b = await contender("b");
  assert.equal(a.isLeader(), true);
  assert.equal(b.isLeader(), false);
  const lease = () => cluster.kube.request<{ spec: { holderIdentity: string; leaseTransitions: number; leaseDurationSeconds: number } }>("GET", `/apis/coordination.k8s.io/v1/namespaces/space-sandboxes/leases/${name}`);
  assert.equal((await lease()).spec.holderIdentity, "a");
  assert.equal((await lease()).spec.leaseDurationSeconds, 2);
  const epochA = a.epoch()!;
  // a crashes (stops renewing without releasing): b takes over once the lease lapses.
  const t0 = Date.now();
  await a.abandon();
  await waitFor(() => b.isLeader(), "b leads after a's lease lapses", 4 * leaseMs, 50);
  const took = Date.now() - t0;
  assert.ok(took < 2 * leaseMs + 1500, `takeover in ${took} ms`);
  assert.equal(b.epoch(), epochA + 1);
  assert.equal((await lease()).spec.holderIdentity, "b");
  // b stops: it releases, c takes over at its next attempt (not after a lease).
  const c = await contender("c");
  assert.equal(c.isLeader(), false);
  const t1 = Date.now();
  await b.stop();
  await waitFor(() => c.isLeader(), "c leads after b released", 4 * leaseMs, 20);
  assert.ok(Date.now() - t1 < leaseMs, `handover in ${Date.now() - t1} ms`);
  assert.deepEqual(elected, ["a", "b", "c"]);
  await c.stop();
});

test("deploy/: the manifests apply to the apiserver and their SPACE_* settings pass the config schema; a node agent and the control plane run a sandbox with exactly the RBAC granted", { skip }, async () => {
  // Apply every manifest for real (no controller-manager here: workloads are stored, not run).
  const docs = readdirSync(DEPLOY)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .flatMap((f) => loadAllYaml(readFileSync(join(DEPLOY, f), "utf8")) as Array<{ apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; spec?: unknown }>);
  const order = ["Namespace", "RuntimeClass", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Service", "Deployment", "DaemonSet"];
  docs.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind));
  for (const d of docs) assert.ok(order.includes(d.kind), `unexpected kind ${d.kind}`);
  const objects = KubernetesObjectApi.makeApiClient(kubeConfigOf({ kind: "kubeconfig", path: cluster.kubeconfigPath }));
  for (const d of docs) {
    await objects.create(d).catch((e: { code?: number; body?: unknown }) => {
      // The harness already made the namespaces and RuntimeClass the manifests declare.
      if (!(e.code === 409 && ["Namespace", "RuntimeClass"].includes(d.kind))) throw new Error(`${d.kind} ${d.metadata.name}: ${String(e.code)} ${JSON.stringify(e.body ?? e)}`);
    });
  }
  // Every container's SPACE_* settings are known variables with valid values.
  for (const d of docs.filter((x) => x.kind === "Deployment" || x.kind === "DaemonSet")) {
    const spec = d.spec as { template: { spec: { containers: Array<{ name: string; env?: Array<{ name: string; value?: string }> }> } } };
    for (const c of spec.template.spec.containers) {
      const env: Record<string, string> = {};
      for (const e of c.env ?? []) env[e.name] = e.value ?? (e.name === "HOST_IP" ? "10.0.0.7" : "from-field");
      for (const [k, v] of Object.entries(env)) env[k] = v.replace(/\$\(([A-Z_]+)\)/g, (_, n: string) => env[n] ?? "");
      assert.doesNotThrow(() => loadConfig(env), `${d.metadata.name}/${c.name}`);
    }
  }

  // Tokens of the two ServiceAccounts the manifests define (TokenRequest API).
  const tokenOf = async (sa: string) =>
    (
      await cluster.kube.request<{ status: { token: string } }>("POST", `/api/v1/namespaces/space-system/serviceaccounts/${sa}/token`, {
        body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 3600 } },
      })
    ).status.token;
  const asSa = async (sa: string) =>
    createKubeApi({ kind: "token", server: cluster.server, token: await tokenOf(sa), caFile: join(cluster.dir, "certs", "apiserver.crt") });
  const nodeKube = await asSa("space-node");
  const cpKube = await asSa("space-control-plane");

  // Minimal: neither identity reaches what it has no business with.
  await assert.rejects(cpKube.request("GET", "/api/v1/namespaces/default/secrets"), (e: { status?: number }) => e.status === 403);
  await assert.rejects(nodeKube.request("POST", "/api/v1/namespaces/space-sandboxes/pods", { body: { apiVersion: "v1", kind: "Pod", metadata: { name: "x" }, spec: { containers: [{ name: "x", image: "x" }] } } }), (e: { status?: number }) => e.status === 403);
  await assert.rejects(nodeKube.request("GET", "/api/v1/namespaces/default/secrets/x"), (e: { status?: number }) => e.status === 403);

  // A node agent with the node's RBAC registers its Node and runs what the control plane (its RBAC) places there.
  const rbacNode = "0b0e6a5e-0000-4000-8000-0000000000bb";
  const port = (nodeApi.address() as AddressInfo).port;
  const kubelet2 = new VirtualKubelet({
    kube: nodeKube,
    agent: { inventory: async () => ({ ...inventory(), nodeId: rbacNode }), manager, snapshots: undefined } as unknown as VirtualKubeletDeps["agent"],
    identity: { name: rbacNode, nodeGroup: "rbac", labels: {}, nodeApiUrl: `http://127.0.0.1:${port}` },
    address: "127.0.0.1",
    version: "test",
    heartbeatMs: 60_000,
    log,
  });
  await kubelet2.start();
  try {
    const s = new KubernetesSubstrate({ kube: cpKube, namespace: "space-sandboxes", internalToken: TOKEN, scheduleDeadlineMs: 20_000, readinessDeadlineMs: 20_000, log });
    const id = "k8srbac1".padEnd(20, "0");
    const ref = await s.place({ ...req(id), nodeGroup: "rbac" }, AbortSignal.timeout(30_000));
    assert.equal(ref.nodeId, rbacNode);
    const st = await s.start(ref, spec(id), AbortSignal.timeout(30_000));
    assert.equal(st.sandboxId, id);
    await s.kill(ref, AbortSignal.timeout(30_000));
    await assert.rejects(cluster.kube.request("GET", `/api/v1/namespaces/space-sandboxes/secrets/${podNameOf(id)}`), (e: { status?: number }) => e.status === 404);
    // The events watch is permitted: a refusal ends the create at once.
    refusal = new SpaceError("invalid_argument", "rootfs_size_mb=300 is smaller than cloned rootfs size 451 MiB");
    try {
      const id2 = "k8srbac2".padEnd(20, "0");
      const ref2 = await s.place({ ...req(id2), nodeGroup: "rbac" }, AbortSignal.timeout(30_000));
      const t0 = Date.now();
      await assert.rejects(s.start(ref2, spec(id2, 300), AbortSignal.timeout(30_000)), (e: SpaceError) => e.code === "invalid_argument");
      assert.ok(Date.now() - t0 < 10_000);
    } finally {
      refusal = undefined;
    }
    // And the controller's Lease.
    const lease = kubeLeaseBackend(cpKube, "space-sandboxes");
    assert.ok(await lease.tryAcquire("space-controller-rbac", "me", 5000));
    await lease.release("space-controller-rbac", "me");
  } finally {
    await kubelet2.stop();
    await cluster.kube.request("DELETE", `/api/v1/nodes/${rbacNode}`);
  }
});

test("census from the Nodes: running bound work on a node publishing its environment is admitted; a fleet-wide label loss counts as no_evidence", { skip }, async () => {
  const dir = new KubeNodeDirectory(cluster.kube, 0);
  const work = [
    { state: "running", nodeId: NODE, binding: { kind: "bound" as const, environment: ENV_A, source: "t" } },
    { state: "creating", nodeId: null, binding: { kind: "bound" as const, environment: ENV_A, source: "t" } },
  ];
  envs = [ENV_A];
  await kubelet.heartbeat();
  const node = (await dir.list(AbortSignal.timeout(10_000))).find((n) => n.id === NODE);
  assert.ok(node && node.status === "ready", JSON.stringify(node));
  assert.deepEqual(node.usableEnvironments, [ENV_A]);
  assert.equal(node.url, `http://127.0.0.1:${(nodeApi.address() as AddressInfo).port}`);
  assert.deepEqual(computeCensus(work, await dir.list(AbortSignal.timeout(10_000))), {
    running: { admitted: 1, no_evidence: 0, environment_not_usable: 0 },
    pending: { no_evidence: 0, environment_not_usable: 0 },
  });
  envs = [];
  await kubelet.heartbeat();
  try {
    // The other SPACE Node in this cluster (the RBAC test's) has stopped heartbeating or publishes none.
    const nodes = (await dir.list(AbortSignal.timeout(10_000))).filter((n) => n.status === "ready");
    assert.ok(nodes.every((n) => n.usableEnvironments.length === 0), JSON.stringify(nodes));
    assert.deepEqual(computeCensus(work, nodes), {
      running: { admitted: 0, no_evidence: 1, environment_not_usable: 0 },
      pending: { no_evidence: 1, environment_not_usable: 0 },
    });
  } finally {
    envs = [ENV_A];
    await kubelet.heartbeat();
  }
});
