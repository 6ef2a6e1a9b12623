/**
 * End to end on the Kubernetes substrate with the e2b SDK: `space api` + `space
 * controller` (SPACE_SUBSTRATE=kubernetes, Postgres) against a real kube-apiserver +
 * kube-scheduler, and 3 real `space node` agents (runc) registered as Nodes that play
 * kubelet for the sandbox pods kube-scheduler binds to them (./fleet.ts).
 *
 * Runs the catalogue's scenarios that apply to this substrate (./scenarios.ts) and prints
 * each one it skips with the reason. Proves: create/exec/files/delete (pod bound, Ready,
 * pod IP = the sandbox's address, no envd token on the pod); the disk refusal ends in 400
 * within seconds via the pod's FailedCreatePodSandBox event; pause (the pod goes) and
 * connect (a new pod on the same node, memory and files kept); fork; warm-pool adoption
 * (members are pods; a create adopts one); node_group affinity; a template build placed
 * on one of the Nodes and booted in a pod.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { Sandbox, Template, type ConnectionOpts } from "e2b";
import { counterScript } from "../support/counter.ts";
import { postgresSkipReason } from "../support/db.ts";
import { waitFor } from "../support/stack.ts";
import { podNameOf } from "../../src/kube/names.ts";
import { getBuild } from "../../src/store/templates.ts";
import { k8sSkipReason } from "./cluster.ts";
import { startKubeFleet, type KubeFleet } from "./fleet.ts";
import { scenarios, skippedOn } from "./scenarios.ts";

const skip: string | false =
  k8sSkipReason ||
  postgresSkipReason ||
  (process.getuid?.() !== 0 ? "node agents run runc, btrfs and netns: run as root" : false) ||
  (!existsSync("dist/envd/envd.mjs") ? "dist/envd/envd.mjs missing: npm run build:envd" : false);

interface Pod {
  metadata: { name: string; uid: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  spec: { nodeName?: string };
  status: { phase?: string; podIP?: string; conditions?: Array<{ type: string; status: string }> };
}

const COUNTER = counterScript().source;

describe("kubernetes substrate end to end (e2b SDK, 3 node agents)", { skip, timeout: 15 * 60_000 }, () => {
  let f: KubeFleet;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];

  const kube = () => f.cluster!.kube;
  const pod = async (sandboxId: string) =>
    kube().request<Pod>("GET", `/api/v1/namespaces/${f.namespace}/pods/${podNameOf(sandboxId)}`).catch((e: { status?: number }) => {
      if (e.status === 404) return null;
      throw e;
    });
  const podGone = (sandboxId: string) => waitFor(async () => (await pod(sandboxId)) === null, `pod of ${sandboxId} deleted`, 30_000, 200);
  const counter = async (sb: Sandbox) => Number((await sb.files.read("/home/user/counter")).trim());
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  before(async () => {
    for (const s of skippedOn("kubernetes")) process.stdout.write(`# skip ${s.name} on kubernetes: ${s.reason}\n`);
    process.stdout.write(`# running on kubernetes: ${scenarios.filter((s) => s.substrates.includes("kubernetes")).map((s) => s.name).join(", ")}\n`);
    const t0 = Date.now();
    // A 30 s schedule/readiness deadline keeps the unschedulable case short.
    f = await startKubeFleet({ nodes: 3, env: { SPACE_DEFAULT_VCPU: "1", SPACE_DEFAULT_MEMORY_MIB: "256", SPACE_KUBE_READY_DEADLINE_MS: "30000" } });
    process.stdout.write(`# cluster + control plane + 3 node agents up in ${Date.now() - t0} ms\n`);
    opts = { apiKey: f.apiKey, apiUrl: f.apiUrl, sandboxUrl: f.gatewayUrl, requestTimeoutMs: 180_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    if (process.env.SPACE_TEST_KEEP_LOGS) for (const p of [f?.api, f?.controller, ...(f?.nodes ?? []).map((n) => n.proc)]) process.stdout.write(`${p?.out().slice(-3000)}\n---\n`);
    await f?.stop();
  });

  test("3 node agents are Nodes: SPACE taint, network slots allocatable, Ready, node-api annotation", async () => {
    const list = await kube().request<{
      items: Array<{
        metadata: { name: string; labels: Record<string, string>; annotations: Record<string, string> };
        spec: { taints?: Array<{ key: string; effect: string }> };
        status: { allocatable: Record<string, string>; conditions: Array<{ type: string; status: string }> };
      }>;
    }>("GET", "/api/v1/nodes", { query: { labelSelector: "space.dev/node=true" } });
    for (const n of f.nodes) {
      const node = list.items.find((x) => x.metadata.name === n.name);
      assert.ok(node, `Node ${n.name} registered`);
      assert.equal(node.metadata.labels["space.dev/node-group"], n.group);
      assert.ok(node.spec.taints?.some((t) => t.key === "space.dev/node" && t.effect === "NoSchedule"));
      assert.equal(node.status.allocatable["space.dev/network-slots"], "20");
      assert.ok(node.status.conditions.some((c) => c.type === "Ready" && c.status === "True"));
      assert.equal(node.metadata.annotations["space.dev/node-api"], `http://127.0.0.1:${n.port}`);
    }
  });

  test("cold_create_environment, command_round_trip, filesystem_round_trip, sandbox_delete: a pod kube-scheduler bound, no token on it", async () => {
    const t0 = Date.now();
    const sb = await Sandbox.create({ ...opts, envs: { K8S_MARK: "on-a-pod" }, timeoutMs: 300_000 });
    const createMs = Date.now() - t0;
    created.push(sb.sandboxId);
    const p = await pod(sb.sandboxId);
    assert.ok(p, "the sandbox is a pod");
    assert.ok(f.nodes.some((n) => n.name === p.spec.nodeName), `bound to one of the 3 node agents (${p.spec.nodeName})`);
    assert.equal(p.status.phase, "Running");
    assert.ok(p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
    const info = await Sandbox.getInfo(sb.sandboxId, opts);
    assert.equal(info.state, "running");
    const podJson = JSON.stringify(p);
    assert.ok(!podJson.includes("on-a-pod"), "env vars are not on the pod");
    const { token } = await f.db.db.one<{ token: string | null }>(`SELECT envd_access_token AS token FROM sandboxes WHERE id = $1`, [sb.sandboxId]);
    assert.ok(token, "the sandbox has an envd token");
    assert.ok(!podJson.includes(token), "the envd token is not on the pod");

    const r = await sb.commands.run("echo hello-$K8S_MARK && id -un");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "hello-on-a-pod\nuser\n");
    const body = `kube ${"x".repeat(10_000)}`;
    await sb.files.write("/home/user/k8s.txt", body);
    assert.equal(await sb.files.read("/home/user/k8s.txt"), body);
    assert.ok((await sb.files.list("/home/user")).some((e) => e.name === "k8s.txt"));
    process.stdout.write(`# SDK create on kubernetes: ${createMs} ms (node ${p.spec.nodeName})\n`);

    await sb.kill();
    await podGone(sb.sandboxId);
    await assert.rejects(Sandbox.getInfo(sb.sandboxId, opts), /not found|404/i);
  });

  test("create_disk_below_rootfs_400: 400 within seconds naming the rootfs size, via the pod's FailedCreatePodSandBox event; nothing left", async () => {
    const since = Date.now();
    const t0 = Date.now();
    await assert.rejects(Sandbox.create({ ...opts, metadata: { "space.resources": JSON.stringify({ disk_mib: 64 }) } }), (e: unknown) => {
      assert.match(String(e), /400/);
      assert.match(String(e), /rootfs/i);
      assert.match(String(e), /64/);
      return true;
    });
    const ms = Date.now() - t0;
    assert.ok(ms < 30_000, `refused in ${ms} ms (the readiness deadline is 120 s)`);
    process.stdout.write(`# disk refusal on kubernetes: 400 in ${ms} ms\n`);
    // It went through a pod: the node recorded the refusal as an Event on it.
    const events = await kube().request<{ items: Array<{ reason: string; message: string; involvedObject: { name: string }; lastTimestamp?: string }> }>(
      "GET",
      `/api/v1/namespaces/${f.namespace}/events`,
      { query: { fieldSelector: "reason=FailedCreatePodSandBox" } },
    );
    const ours = events.items.filter((e) => /rootfs/.test(e.message) && /\[space-err=InvalidArgument\]/.test(e.message) && Date.parse(e.lastTimestamp ?? "") >= since - 2000);
    assert.ok(ours.length >= 1, JSON.stringify(events.items.map((e) => e.message)));
    const podName = ours[0]!.involvedObject.name;
    await waitFor(
      () => kube().request("GET", `/api/v1/namespaces/${f.namespace}/pods/${podName}`).then(() => undefined, (e: { status?: number }) => e.status === 404 || undefined),
      "the refused pod deleted",
      30_000,
      200,
    );
    await waitFor(
      () => kube().request("GET", `/api/v1/namespaces/${f.namespace}/secrets/${podName}`).then(() => undefined, (e: { status?: number }) => e.status === 404 || undefined),
      "its spec secret deleted",
      30_000,
      200,
    );
  });

  test("pause_connect and fork: pause deletes the pod; connect restores on a new pod (files, env, process memory); a fork is independent", async () => {
    const sb = await Sandbox.create({ ...opts, envs: { SNAP_MARK: "k8s-snap" }, timeoutMs: 600_000 });
    created.push(sb.sandboxId);
    await sb.files.write("/home/user/note.txt", "before-pause");
    await sb.files.write("/home/user/count.py", COUNTER);
    await sb.commands.run("nohup python3 /home/user/count.py >/dev/null 2>&1 &");
    await waitFor(async () => (await counter(sb)) > 0, "the counter runs", 10_000, 100);
    const before1 = await pod(sb.sandboxId);
    assert.ok(before1);

    const t0 = Date.now();
    assert.equal(await sb.pause(), true);
    const pauseMs = Date.now() - t0;
    assert.equal((await Sandbox.getInfo(sb.sandboxId, opts)).state, "paused");
    await podGone(sb.sandboxId);
    const c1 = await (async () => {
      const t1 = Date.now();
      const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
      const connectMs = Date.now() - t1;
      process.stdout.write(`# kubernetes pause ${pauseMs} ms, connect ${connectMs} ms\n`);
      const after1 = await pod(sb.sandboxId);
      assert.ok(after1, "a pod again");
      assert.notEqual(after1.metadata.uid, before1.metadata.uid, "a new pod (new execution)");
      assert.equal(after1.status.phase, "Running");
      assert.equal(await back.files.read("/home/user/note.txt"), "before-pause");
      assert.equal((await back.commands.run("echo $SNAP_MARK")).stdout, "k8s-snap\n");
      const c = await counter(back);
      assert.ok(c > 0);
      await sleep(400);
      assert.ok((await counter(back)) > c, "the process kept running from its memory");
      return c;
    })();

    const forks = await Sandbox.fork(sb.sandboxId, { ...opts, count: 1, timeoutMs: 300_000 });
    assert.equal(forks.length, 1);
    assert.ok(!(forks[0] instanceof Error), `fork failed: ${String(forks[0])}`);
    const fk = forks[0] as Sandbox;
    created.push(fk.sandboxId);
    const fp = await pod(fk.sandboxId);
    assert.ok(fp && fp.status.phase === "Running", "the fork is a pod of its own");
    assert.equal(await fk.files.read("/home/user/note.txt"), "before-pause");
    assert.ok((await counter(fk)) >= c1, "the fork has the source's past");
    await fk.files.write("/home/user/only-in-fork.txt", "x");
    const src = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.equal(await src.files.exists("/home/user/only-in-fork.txt"), false, "independent disks");
    await fk.kill();
    await src.kill();
    await Promise.all([podGone(fk.sandboxId), podGone(sb.sandboxId)]);
  });

  test("node_group_boundary_schedules: node_group becomes node affinity; kube-scheduler binds to that group's Node", async () => {
    const target = f.nodes[2]!;
    const sb = await Sandbox.create({ ...opts, metadata: { "space.placement": JSON.stringify({ node_group: target.group }) }, timeoutMs: 120_000 });
    created.push(sb.sandboxId);
    assert.equal((await pod(sb.sandboxId))?.spec.nodeName, target.name);
    // No Node in that group: the pod stays unschedulable; the create fails at the deadline
    // naming kube-scheduler's reason, and the pod is deleted.
    await assert.rejects(
      Sandbox.create({ ...opts, metadata: { "space.placement": JSON.stringify({ node_group: "nowhere" }) }, requestTimeoutMs: 120_000 }),
      (e: unknown) => {
        process.stdout.write(`# unschedulable create: ${String(e).slice(0, 300)}\n`);
        return /kube-scheduler/.test(String(e)) && /affinity|selector/i.test(String(e));
      },
    );
    const left = await kube().request<{ items: unknown[] }>("GET", `/api/v1/namespaces/${f.namespace}/pods`, { query: { fieldSelector: "status.phase=Pending" } });
    assert.equal(left.items.length, 0, "the unschedulable pod was deleted");
    await sb.kill();
  });

  test("warm_pool_environment: members are pods on the Nodes; an SDK create adopts one (its env var inside, no restart)", async () => {
    assert.equal((await f.admin("PUT", "/warm-pools/base", { size: 2 })).status < 300, true);
    const readyIds = async () =>
      ((await f.admin("GET", "/warm-pools/base")).body.members as Array<{ state: string; sandbox_id: string }>).filter((m) => m.state === "ready").map((m) => m.sandbox_id);
    const members = await waitFor(async () => ((await readyIds()).length >= 2 ? await readyIds() : undefined), "2 ready warm members", 180_000, 500);
    for (const id of members) {
      const p = await pod(id);
      assert.ok(p && p.status.phase === "Running" && f.nodes.some((n) => n.name === p.spec.nodeName), `member ${id} is a running pod`);
    }
    const t0 = Date.now();
    const sb = await Sandbox.create({ ...opts, envs: { WARM_MARK: "adopted" }, timeoutMs: 120_000 });
    const ms = Date.now() - t0;
    created.push(sb.sandboxId);
    assert.ok(members.includes(sb.sandboxId), `adopted a member (${sb.sandboxId} in ${members.join(",")})`);
    assert.equal((await sb.commands.run("echo $WARM_MARK")).stdout, "adopted\n");
    process.stdout.write(`# warm create on kubernetes: ${ms} ms\n`);
    await sb.kill();
    assert.equal((await f.admin("DELETE", "/warm-pools/base")).status, 204);
    await waitFor(async () => (await f.admin("GET", "/warm-pools/base")).status === 404, "pool gone", 60_000, 500);
  });

  test("template_build_boots: the build is placed on one of the Nodes and followed there; Sandbox.create(alias) boots it in a pod", async () => {
    const t0 = Date.now();
    const info = await Template.build(Template().fromTemplate("base").runCmd("echo built-on-kubernetes > /opt/k8s-mark"), "k8s-tpl", { ...opts, requestTimeoutMs: 600_000 });
    process.stdout.write(`# template build on kubernetes: ${Date.now() - t0} ms\n`);
    // Placement chose one of the Nodes (their ids are Node names), and the build ran there.
    const builtOn = (await getBuild(f.db.db, info.buildId)).spec.nodeId;
    const node = f.nodes.find((n) => n.name === builtOn);
    assert.ok(node, `built on a Node (${String(builtOn)})`);
    // Booted on that Node (its group): a pod's node does not pull a template it lacks (the node agent's kubelet path has no on-demand pull).
    const sb = await Sandbox.create("k8s-tpl", { ...opts, metadata: { "space.placement": JSON.stringify({ node_group: node.group }) }, timeoutMs: 120_000 });
    created.push(sb.sandboxId);
    assert.equal((await pod(sb.sandboxId))?.spec.nodeName, node.name);
    assert.equal((await sb.commands.run("cat /opt/k8s-mark")).stdout, "built-on-kubernetes\n");
    await sb.kill();
  });
});
