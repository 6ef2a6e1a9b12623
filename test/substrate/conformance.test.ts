/**
 * One conformance suite for every Substrate (as the blob stores share one): the fake, the
 * Direct substrate against a node-api node, and the Kubernetes substrate against a real
 * kube-apiserver + kube-scheduler with the real VirtualKubelet and the same node-api
 * (skipped, naming why, when the binary is absent). The node is test/substrate/memory-node.ts:
 * the real node-api routes over in-memory state. What one substrate cannot do is skipped
 * per case with its reason.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { SpaceError } from "../../src/core/errors.ts";
import { createLogger } from "../../src/core/log.ts";
import type { SandboxEgress, SandboxInit, SandboxMetrics } from "../../src/contract/node-api.ts";
import type { SandboxLogEntry } from "../../src/contract/envd-logs.ts";
import type { NodeBuildRequest } from "../../src/contract/node-builds.ts";
import { VirtualKubelet, type VirtualKubeletDeps } from "../../src/node/kubelet/virtual-kubelet.ts";
import { DirectSubstrate } from "../../src/substrate/direct/direct-substrate.ts";
import type { NodeDirectory, NodeEntry } from "../../src/substrate/node-directory.ts";
import { FakeSubstrate } from "../../src/substrate/fake-substrate.ts";
import { KubernetesSubstrate } from "../../src/substrate/kubernetes/kubernetes-substrate.ts";
import type { SandboxRef, SandboxSpec, Substrate } from "../../src/substrate/substrate.ts";
import { k8sSkipReason, startCluster } from "../kubernetes/cluster.ts";
import { MemoryNode } from "./memory-node.ts";

const log = createLogger(process.env.SPACE_TEST_LOG ?? "silent", "test");
const TOKEN = "conformance-node-token";
const signal = () => AbortSignal.timeout(60_000);

/** What the node was handed, as each lane can tell. */
interface NodeView {
  nodeId: string;
  inits(): Array<{ sandboxId: string; body: SandboxInit }>;
  egress(sandboxId: string): Pick<SandboxEgress, "allowInternetAccess"> | undefined;
  build(buildId: string): NodeBuildRequest | undefined;
  template(alias: string): string | undefined;
  /** Puts log entries and metrics samples on the node for a sandbox (what its telemetry would have recorded). */
  seed(sandboxId: string, logs: SandboxLogEntry[], metrics: SandboxMetrics[]): void;
}

interface Env {
  substrate: Substrate;
  node: NodeView;
  close(): Promise<void>;
}

interface Lane {
  name: string;
  skip: string | false;
  /** Cases this substrate cannot run: title → why. */
  cannot: Record<string, string>;
  open(): Promise<Env>;
}

function memoryView(node: MemoryNode, nodeId: string): NodeView {
  return {
    nodeId,
    inits: () => node.inits,
    egress: (id) => node.egress.get(id),
    build: (id) => node.builds.get(id),
    template: (alias) => node.templates.get(alias),
    seed: (id, logs, metrics) => {
      node.logs.set(id, logs);
      node.history.set(id, metrics);
    },
  };
}

const UNKNOWN_NODE = "an unknown node: not_found for every node verb";

const lanes: Lane[] = [
  {
    name: "fake",
    skip: false,
    cannot: { [UNKNOWN_NODE]: "the fake has no node directory: every node id names a node" },
    async open() {
      const s = new FakeSubstrate();
      return {
        substrate: s,
        node: {
          nodeId: "00000000-0000-4000-8000-000000000001",
          inits: () => s.inits,
          egress: (id) => (s.egress.has(id) ? { allowInternetAccess: s.egress.get(id)! } : undefined),
          build: (id) => s.builds.get(`00000000-0000-4000-8000-000000000001 ${id}`),
          template: (alias) => s.templates.get(`00000000-0000-4000-8000-000000000001 ${alias}`),
          seed: (id, logs, metrics) => {
            s.logEntries.set(id, logs);
            s.history.set(id, metrics);
          },
        },
        close: async () => undefined,
      };
    },
  },
  {
    name: "direct",
    skip: false,
    cannot: {},
    async open() {
      const nodeId = "0c0f0000-0000-4000-8000-000000000001";
      const node = new MemoryNode(nodeId, TOKEN, log);
      const url = await node.listen();
      const entry: NodeEntry = {
        id: nodeId,
        name: "conformance-node",
        url,
        status: "ready",
        nodeGroup: "default",
        labels: {},
        usableEnvironments: [],
        capacity: null,
        used: null,
        templates: [],
      };
      const nodes: NodeDirectory = { list: async () => [entry], get: async (id) => (id === nodeId ? entry : null) };
      return { substrate: new DirectSubstrate({ nodes, internalToken: TOKEN }), node: memoryView(node, nodeId), close: () => node.close() };
    },
  },
  {
    name: "kubernetes",
    skip: k8sSkipReason,
    cannot: {},
    async open() {
      const nodeId = "0c0f0000-0000-4000-8000-0000000000k8";
      const cluster = await startCluster();
      const node = new MemoryNode(nodeId, TOKEN, log);
      const url = await node.listen();
      const kubelet = new VirtualKubelet({
        kube: cluster.kube,
        agent: node.agent as unknown as VirtualKubeletDeps["agent"],
        identity: { name: nodeId, nodeGroup: "default", labels: {}, nodeApiUrl: url },
        address: "127.0.0.1",
        version: "test",
        heartbeatMs: 60_000,
        log,
      });
      await kubelet.start();
      const substrate = new KubernetesSubstrate({
        kube: cluster.kube,
        namespace: "space-sandboxes",
        internalToken: TOKEN,
        scheduleDeadlineMs: 20_000,
        readinessDeadlineMs: 20_000,
        log,
      });
      return {
        substrate,
        node: memoryView(node, nodeId),
        async close() {
          await kubelet.stop();
          await node.close();
          await cluster.stop();
        },
      };
    },
  },
];

let seq = 0;
/** A fresh sandbox id (20 lower-case letters and digits, as node-api requires). */
const newId = (lane: string) => `${lane.slice(0, 4)}${String(++seq).padStart(16, "0")}`;

const specOf = (sandboxId: string): SandboxSpec =>
  ({ sandboxId, executionId: `ex_${sandboxId}`, template: "base", vcpu: 1, memoryMib: 256, diskMib: 1024, envVars: {}, accessToken: "tok", allowInternetAccess: true }) as SandboxSpec;

const isCode = (code: string) => (e: unknown) => {
  assert.ok(e instanceof SpaceError, `not a SpaceError: ${String(e)}`);
  assert.equal(e.code, code, e.message);
  return true;
};

for (const lane of lanes) {
  describe(`Substrate conformance: ${lane.name}`, { skip: lane.skip }, () => {
    let env: Env;
    const s = () => env.substrate;
    const it = (title: string, fn: () => Promise<void>) => test(title, { skip: lane.cannot[title] ?? false }, fn);
    /** A running sandbox, placed and started. */
    const running = async (): Promise<SandboxRef> => {
      const id = newId(lane.name);
      const ref = await s().place({ sandboxId: id, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024 }, signal());
      await s().start(ref, specOf(id), signal());
      return ref;
    };

    before(async () => {
      env = await lane.open();
    });
    after(async () => {
      await env?.close();
    });

    it("place and start: running, where placed; observe sees it; kill ends it and is idempotent", async () => {
      const id = newId(lane.name);
      const ref = await s().place({ sandboxId: id, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024 }, signal());
      assert.equal(ref.sandboxId, id);
      assert.equal(ref.nodeId, env.node.nodeId);
      const st = await s().start(ref, specOf(id), signal());
      assert.equal(st.sandboxId, id);
      assert.equal(st.state, "running");
      assert.equal((await s().observe(ref, signal()))?.state, "running");
      await s().kill(ref, signal());
      assert.equal(await s().observe(ref, signal()), null);
      await s().kill(ref, signal());
    });

    it("pause, resume, stop and restart move the sandbox on its node", async () => {
      const ref = await running();
      assert.equal((await s().pause(ref, signal())).state, "paused");
      assert.equal((await s().resume(ref, signal())).state, "running");
      assert.equal((await s().stop(ref, signal())).state, "stopped");
      assert.equal((await s().restart(ref, signal())).state, "running");
      assert.equal((await s().observe(ref, signal()))?.state, "running");
      await s().kill(ref, signal());
    });

    it("restart of a sandbox that is not stopped: failed_precondition", async () => {
      const ref = await running();
      await assert.rejects(s().restart(ref, signal()), isCode("failed_precondition"));
      await s().kill(ref, signal());
    });

    it("init hands env vars and the access token to the running sandbox, which keeps running", async () => {
      const ref = await running();
      await s().init(ref, { envVars: { WARM: "1" }, accessToken: "personal" }, signal());
      assert.deepEqual(env.node.inits().find((i) => i.sandboxId === ref.sandboxId)?.body, { envVars: { WARM: "1" }, accessToken: "personal" });
      assert.equal((await s().observe(ref, signal()))?.state, "running");
      await s().kill(ref, signal());
    });

    it("verbs on a sandbox its node does not know: observe null, the others not_found", async () => {
      const ref = await running();
      await s().kill(ref, signal());
      assert.equal(await s().observe(ref, signal()), null);
      await assert.rejects(s().init(ref, {}, signal()), isCode("not_found"));
      await assert.rejects(s().pause(ref, signal()), isCode("not_found"));
      await assert.rejects(s().metrics(ref, signal()), isCode("not_found"));
    });

    it("egress, network record and metrics of a running sandbox", async () => {
      const ref = await running();
      await s().setEgress(ref, { allowInternetAccess: false }, signal());
      assert.equal(env.node.egress(ref.sandboxId)?.allowInternetAccess, false);
      assert.deepEqual(await s().networkRecord(ref, signal()), { observed: [], denied: [] });
      const m = await s().metrics(ref, signal());
      assert.equal(typeof m.cpuCount, "number");
      assert.equal(typeof m.memTotal, "number");
      await s().kill(ref, signal());
    });

    it("logs and metrics history: the query's selection through the wire, kept after kill, [] for a sandbox never there", async () => {
      const ref = await running();
      const t0 = Math.floor(Date.now() / 1000) * 1000 - 60_000;
      const at = (ms: number) => new Date(t0 + ms).toISOString();
      const sample = (ms: number): SandboxMetrics => ({ timestamp: at(ms), cpuCount: 1, cpuUsedPct: 1, memUsed: 1, memTotal: 2, memCache: 0, diskUsed: 1, diskTotal: 2 });
      env.node.seed(
        ref.sandboxId,
        [
          { timestamp: at(0), level: "debug", message: "request", fields: { path: "/files" } },
          { timestamp: at(1000), level: "info", message: "process started", fields: { pid: "7" } },
          { timestamp: at(2000), level: "warn", message: "process ended", fields: { exitCode: "3" } },
        ],
        [sample(0), sample(5000), sample(10_000)],
      );
      const messages = (l: SandboxLogEntry[]) => l.map((e) => e.message);
      assert.deepEqual(messages(await s().logs(ref, { direction: "forward", limit: 10 }, signal())), ["request", "process started", "process ended"]);
      assert.deepEqual(messages(await s().logs(ref, { direction: "backward", limit: 1, level: "info" }, signal())), ["process ended"]);
      assert.deepEqual(messages(await s().logs(ref, { direction: "forward", limit: 10, cursorMs: t0 + 1000, search: "process" }, signal())), ["process started", "process ended"]);
      assert.deepEqual((await s().logs(ref, { direction: "forward", limit: 1 }, signal()))[0]?.fields, { path: "/files" });
      const range = await s().metricsHistory(ref, { startMs: t0 + 1, endMs: t0 + 5000 }, signal());
      assert.deepEqual(range.map((m) => m.timestamp), [at(5000)]);
      await s().kill(ref, signal());
      assert.equal((await s().logs(ref, { direction: "forward", limit: 10 }, signal())).length, 3);
      assert.equal((await s().metricsHistory(ref, {}, signal())).length, 3);
      const never = { sandboxId: newId(lane.name), nodeId: ref.nodeId };
      assert.deepEqual(await s().logs(never, { direction: "forward", limit: 10 }, signal()), []);
      assert.deepEqual(await s().metricsHistory(never, {}, signal()), []);
    });

    it("proxyTarget names the sandbox's port on its node, with the headers that authenticate the gateway", async () => {
      const ref = await running();
      const t = await s().proxyTarget(ref, 49983, signal());
      assert.ok(t.baseUrl.pathname.endsWith(`/v1/sandboxes/${ref.sandboxId}/proxy/49983`), t.baseUrl.href);
      assert.ok(Object.keys(t.headers).length > 0);
      await s().kill(ref, signal());
    });

    it("suspend: a descriptor, and the sandbox left its node; restore where placed: running again", async () => {
      const ref = await running();
      const d = await s().suspend(ref, { snapshotId: "sn_conformance00001", upload: true }, signal());
      assert.equal(d.snapshotId, "sn_conformance00001");
      assert.equal(d.sourceSandboxId, ref.sandboxId);
      assert.ok(d.parts.length > 0);
      assert.equal(await s().observe(ref, signal()), null);
      const again = await s().place({ sandboxId: ref.sandboxId, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024, pinnedNodeId: ref.nodeId }, signal());
      const st = await s().restore(again, d, specOf(ref.sandboxId), signal());
      assert.equal(st.state, "running");
      await s().kill(again, signal());
      await s().dropSnapshot(ref.nodeId, d.snapshotId, signal());
    });

    it("a suspend kept local (no parts) is published later: the descriptor then lists its parts; an unknown copy is not found", async () => {
      const ref = await running();
      const d = await s().suspend(ref, { snapshotId: "sn_conformance00003", upload: false }, signal());
      assert.deepEqual(d.parts, []);
      const published = await s().publishSnapshot(ref.nodeId, d.snapshotId, signal());
      assert.equal(published.snapshotId, d.snapshotId);
      assert.ok(published.parts.some((p) => p.kind === "disk"));
      await assert.rejects(s().publishSnapshot(ref.nodeId, "sn_conformance00009", signal()), (e: unknown) => e instanceof SpaceError && e.code === "not_found");
      await s().dropSnapshot(ref.nodeId, d.snapshotId, signal());
    });

    it("capture keeps the sandbox running; dropSnapshot is idempotent", async () => {
      const ref = await running();
      const d = await s().capture(ref, { snapshotId: "sn_conformance00002", upload: false }, signal());
      assert.equal(d.snapshotId, "sn_conformance00002");
      assert.equal((await s().observe(ref, signal()))?.state, "running");
      await s().dropSnapshot(ref.nodeId, d.snapshotId, signal());
      await s().dropSnapshot(ref.nodeId, d.snapshotId, signal());
      await s().kill(ref, signal());
    });

    it("a template build: started on a node, followed (logs from an offset) to its result; node templates pointed and dropped", async () => {
      const nodeId = env.node.nodeId;
      const req: NodeBuildRequest = { buildId: "bd_conformance0001", name: "bd-conformance0001", recipe: { from: { kind: "template", name: "base" }, steps: [] } };
      await s().startBuild(nodeId, req, signal());
      await s().startBuild(nodeId, req, signal()); // idempotent by build id
      assert.equal(env.node.build(req.buildId)?.name, req.name);
      const st = await s().buildStatus(nodeId, req.buildId, 0, signal());
      assert.equal(st.status, "ready");
      assert.equal(st.result?.name, req.name);
      assert.ok(st.logEntries.length > 0);
      assert.equal((await s().buildStatus(nodeId, req.buildId, st.logsTotal, signal())).logEntries.length, 0);
      await assert.rejects(s().buildStatus(nodeId, "bd_never", 0, signal()), isCode("not_found"));
      await s().pointTemplate(nodeId, "tpl-conformance", req.name, signal());
      assert.equal(env.node.template("tpl-conformance"), req.name);
      await s().dropTemplate(nodeId, "tpl-conformance", signal());
      assert.equal(env.node.template("tpl-conformance"), undefined);
      await s().dropTemplate(nodeId, "tpl-conformance", signal());
    });

    it(UNKNOWN_NODE, async () => {
      const ref = { sandboxId: newId(lane.name), nodeId: "0c0f0000-0000-4000-8000-00000000dead" };
      await assert.rejects(s().restart(ref, signal()), isCode("not_found"));
      await assert.rejects(s().init(ref, {}, signal()), isCode("not_found"));
      await assert.rejects(s().startBuild(ref.nodeId, { buildId: "bd_x", name: "bd-x", recipe: { from: { kind: "template", name: "base" }, steps: [] } }, signal()), isCode("not_found"));
      await assert.rejects(s().buildStatus(ref.nodeId, "bd_x", 0, signal()), isCode("not_found"));
      // Killing on a node that is gone is done: it holds nothing.
      await s().kill(ref, signal());
    });
  });
}
