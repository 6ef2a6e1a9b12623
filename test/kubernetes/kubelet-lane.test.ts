/**
 * The real-kubelet lane: the Helm chart (deploy/helm/space) installed with helm on etcd +
 * kube-apiserver + kube-scheduler (./cluster.ts) and kube-controller-manager + a kubelet
 * with containerd, CNI and kube-proxy (./kubelet-node.ts), the image scripts/image/build.sh
 * builds imported into that containerd. The migration Job, the API and controller
 * Deployments and the node agent DaemonSet run as real pods; Postgres is the machine's and
 * the blob store S3 (s3rver), both reached from pods at the node's address. Then the
 * unmodified e2b SDK creates a sandbox through the API Service's ClusterIP (kube-proxy
 * translates it) and runs a command in it: the node agent pod plays kubelet for its own
 * virtual Node, where kube-scheduler binds the sandbox's pod.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { existsSync, linkSync, copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer, connect, type Server } from "node:net";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Sandbox, type ConnectionOpts } from "e2b";
import { baseRecipeDigest } from "../../src/node/templates/base-template.ts";
import { inCidr } from "../../src/core/cidr.ts";
import { freshDb, postgresAdminUrl, postgresSkipReason, type TestDb } from "../support/db.ts";
import { startS3Server, type TestS3Server } from "../support/s3.ts";
import { freePort, hostScopeFor, waitFor } from "../support/stack.ts";
import { podNameOf } from "../../src/kube/names.ts";
import { removeNodeContainers, removeNodeNetwork } from "../support/node-network-cleanup.ts";
import { k8sSkipReason } from "./cluster.ts";
import { kubeletLaneSkipReason, startKubeletLane, type KubeletLane } from "./kubelet-node.ts";

const execFileP = promisify(execFile);
const skip: string | false = k8sSkipReason || postgresSkipReason || kubeletLaneSkipReason();
const CHART = "deploy/helm/space";
const NS = "space-system";
const SANDBOX_NS = "space-sandboxes";
const TEMPLATES = process.env.SPACE_BASE_TEMPLATE_DIR || join(import.meta.dirname, "..", "..", ".tools", "templates");

interface Pod {
  metadata: { name: string; labels?: Record<string, string> };
  spec: { nodeName?: string; hostNetwork?: boolean };
  status: { phase?: string; podIP?: string; conditions?: Array<{ type: string; status: string }>; containerStatuses?: Array<{ image: string; ready: boolean }> };
}

/** A command's stdout; never synchronous: the cluster's processes log to pipes this process must keep draining. */
async function run(cmd: string, args: string[], timeout = 900_000): Promise<string> {
  try {
    return (await execFileP(cmd, args, { encoding: "utf8", timeout, maxBuffer: 64 * 1024 * 1024 })).stdout;
  } catch (e) {
    const x = e as { code?: unknown; signal?: unknown; stdout?: string; stderr?: string };
    throw new Error(`${cmd} ${args.join(" ")}: exit ${String(x.code ?? x.signal)}\n${x.stdout ?? ""}\n${x.stderr ?? ""}`);
  }
}

/** A TCP relay on `host` to 127.0.0.1:`port` (the machine's Postgres listens on loopback only; pods cannot reach that). */
async function relay(host: string, port: number): Promise<{ server: Server; port: number }> {
  const server = createServer((c) => {
    const up = connect(port, "127.0.0.1");
    c.pipe(up).pipe(c);
    c.on("error", () => up.destroy());
    up.on("error", () => c.destroy());
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  return { server, port: (server.address() as { port: number }).port };
}

describe("the Helm chart on a real kubelet: pods for migrate, api, controller and node; the e2b SDK through the API Service", { skip, timeout: 30 * 60_000 }, () => {
  let lane: KubeletLane;
  let db: TestDb;
  let s3: TestS3Server;
  let pgRelay: { server: Server; port: number } | undefined;
  let helmBin = "";
  let imageTag = "";
  let scope: Record<string, string> = {};
  const adminToken = `adm_${randomBytes(16).toString("hex")}`;
  const kube = () => lane.cluster.kube;
  const helm = (...args: string[]) => run(helmBin, [...args, "--kubeconfig", lane.cluster.kubeconfigPath]);
  const pods = async (ns: string, selector: string) =>
    (await kube().request<{ items: Pod[] }>("GET", `/api/v1/namespaces/${ns}/pods`, { query: { labelSelector: selector } })).items;
  const ready = (p: Pod) => p.status.phase === "Running" && !!p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True");

  before(async () => {
    helmBin = (await run("bash", ["scripts/setup/helm.sh"])).trim().split("\n").pop()!;
    const t0 = Date.now();
    const ref = (await run("bash", ["scripts/image/build.sh"])).trim().split("\n").pop()!;
    imageTag = ref.split(":").pop()!;
    process.stdout.write(`# image ${ref} in ${Date.now() - t0} ms\n`);
    const t1 = Date.now();
    lane = await startKubeletLane();
    process.stdout.write(`# etcd + apiserver + scheduler + controller-manager + containerd + kubelet + kube-proxy: Node ${lane.nodeName} Ready in ${Date.now() - t1} ms\n`);

    // The image into the kubelet's containerd, named as the chart's pods ask for it (space:<tag>).
    const archive = join(lane.dir, "space-image.tar");
    await run("skopeo", ["copy", "--quiet", `containers-storage:${ref}`, `oci-archive:${archive}:docker.io/library/space:${imageTag}`]);
    lane.ctr("images", "import", archive);
    assert.ok(lane.ctr("images", "ls", "-q").split("\n").includes(`docker.io/library/space:${imageTag}`), "the image is in the kubelet's containerd");

    db = await freshDb("postgres", { migrate: false });
    pgRelay = await relay(lane.nodeIp, Number(new URL(postgresAdminUrl!).port || 5432));
    const dbUrl = new URL(db.url);
    dbUrl.hostname = lane.nodeIp;
    dbUrl.port = String(pgRelay.port);
    s3 = await startS3Server({ address: lane.nodeIp, buckets: ["space-kubelet"] });

    // The node agent's state (hostPath) under the lane's shared mount; the base template
    // tarball it would otherwise debootstrap, taken from this machine's cache.
    const dataDir = join(lane.dir, "node");
    const templates = join(dataDir, "templates");
    mkdirSync(templates, { recursive: true });
    const stem = `base-${baseRecipeDigest().slice(0, 12)}`;
    for (const ext of [".tar", ".json"]) {
      const from = join(TEMPLATES, stem + ext);
      assert.ok(existsSync(from), `${from}: run scripts/setup.sh (builds the base template)`);
      try {
        linkSync(from, join(templates, stem + ext));
      } catch {
        copyFileSync(from, join(templates, stem + ext));
      }
    }
    scope = { ...hostScopeFor(dataDir), SPACE_NODE_MAX_SLOTS: "20" };
    const values = {
      image: { repository: "space", tag: imageTag, pullPolicy: "Never" },
      database: { url: dbUrl.toString() },
      blob: { url: "s3://space-kubelet/lane", s3: { endpoint: s3.endpoint, region: "us-east-1", forcePathStyle: true, accessKeyId: "S3RVER", secretAccessKey: "S3RVER" } },
      secrets: { adminToken },
      // One of each on a 2-core machine, with requests it can hold.
      api: { replicas: 1, resources: { requests: { cpu: "100m", memory: "256Mi" } } },
      controller: { replicas: 1, resources: { requests: { cpu: "100m", memory: "256Mi" } } },
      // This VM's kernel has no /lib/modules (everything built in).
      node: { mountLibModules: existsSync("/lib/modules"), dataDir, runDir: join(lane.dir, "run"), port: await freePort(), resources: { requests: { cpu: "100m", memory: "256Mi" } } },
      extraEnv: { ...scope, SPACE_NODE_BTRFS_IMAGE_GIB: "8", SPACE_DEFAULT_VCPU: "1", SPACE_DEFAULT_MEMORY_MIB: "256" },
    };
    const valuesFile = join(lane.dir, "values.json");
    writeFileSync(valuesFile, JSON.stringify(values), { mode: 0o600 });
    const t2 = Date.now();
    // --wait: the migration hook Job completes first, then every Deployment and the DaemonSet is ready.
    try {
      await helm("install", "space", CHART, "--namespace", NS, "--create-namespace", "-f", valuesFile, "--wait", "--timeout", "12m");
    } catch (e) {
      throw new Error(`${e instanceof Error ? e.message : String(e)}\n${await lane.diagnose()}`);
    }
    process.stdout.write(`# helm install --wait (migration Job, api, controller, node pods) in ${Date.now() - t2} ms\n`);
  });

  after(async () => {
    if (process.env.SPACE_TEST_KEEP_LOGS && lane) process.stdout.write(`${await lane.diagnose()}\n${lane.logs()}\n`);
    if (lane && helmBin) await helm("uninstall", "space", "--namespace", NS, "--wait", "--timeout", "3m").catch((e: unknown) => process.stdout.write(`# helm uninstall: ${String(e)}\n`));
    await lane?.stop();
    // The agent releases its host objects when its pod stops (SPACE_NODE_RELEASE_ON_STOP); a killed one cannot.
    if (scope.SPACE_NODE_BRIDGE) {
      removeNodeContainers("runc", scope.SPACE_NODE_RUNTIME_STATE_DIR!);
      removeNodeNetwork({ bridge: scope.SPACE_NODE_BRIDGE, nftTable: scope.SPACE_NODE_NFT_TABLE!, vethPrefix: scope.SPACE_NODE_VETH_PREFIX! });
    }
    pgRelay?.server.close();
    await s3?.stop();
    await db?.drop();
  });

  test("the migration Job ran `space migrate`; api and controller are Deployment pods on the CNI network; the node agent is the DaemonSet pod", async () => {
    const jobs = await kube().request<{ items: Array<{ status: { succeeded?: number } }> }>("GET", `/apis/batch/v1/namespaces/${NS}/jobs`).catch(() => ({ items: [] }));
    // A hook Job is deleted once it succeeded (hook-delete-policy); the schema it made stays.
    assert.ok(jobs.items.every((j) => j.status.succeeded === 1));
    const { n } = await db.db.one<{ n: string }>(`SELECT count(*)::text AS n FROM information_schema.tables WHERE table_name = 'sandboxes'`);
    assert.equal(n, "1", "the migration Job created the schema");
    for (const name of ["space-api", "space-controller"]) {
      const [p] = await pods(NS, `app.kubernetes.io/name=${name}`);
      assert.ok(p && ready(p), `${name} pod Ready: ${JSON.stringify(p?.status)}`);
      assert.equal(p.spec.nodeName, lane.nodeName);
      assert.ok(p.status.podIP && inCidr(p.status.podIP, lane.podCidr), `${name} pod IP ${p.status.podIP} from the CNI range ${lane.podCidr}`);
      assert.equal(p.status.containerStatuses?.[0]?.image, `docker.io/library/space:${imageTag}`);
    }
    // Ready once the agent formatted its node cache and imported the base template (minutes on a busy machine).
    const node = await waitFor(async () => (await pods(NS, "app.kubernetes.io/name=space-node")).find(ready), "the space-node pod Ready", 600_000, 1000).catch(async (e: unknown) => {
      // Say why: the pod's status and the agent's last log lines.
      const [p] = await pods(NS, "app.kubernetes.io/name=space-node").catch(() => []);
      const log = p ? await kube().request<string>("GET", `/api/v1/namespaces/${NS}/pods/${p.metadata.name}/log`, { query: { tailLines: "60" } }).catch((x: unknown) => String(x)) : "no pod";
      throw new Error(`${(e as Error).message}\nstatus: ${JSON.stringify(p?.status)}\nlog:\n${log}`);
    });
    assert.equal(node.spec.nodeName, lane.nodeName);
    assert.equal(node.spec.hostNetwork, true);
    // The agent in that pod registered its own virtual Node (its sandboxes' pods go there).
    const virtual = await waitFor(async () => {
      const l = await kube().request<{ items: Array<{ metadata: { name: string }; status: { conditions: Array<{ type: string; status: string }> } }> }>("GET", "/api/v1/nodes", { query: { labelSelector: "space.dev/node=true" } });
      return l.items.length ? l : undefined;
    }, "the agent's virtual Node", 120_000, 1000);
    assert.equal(virtual.items.length, 1);
    assert.ok(virtual.items[0]!.status.conditions.some((c) => c.type === "Ready" && c.status === "True"));
  });

  test("the e2b SDK creates a sandbox through the API Service (ClusterIP, kube-proxy) and runs a command; its pod is on the agent's Node", async () => {
    const svc = await kube().request<{ spec: { clusterIP: string } }>("GET", `/api/v1/namespaces/${NS}/services/space-api`);
    const ip = svc.spec.clusterIP;
    assert.ok(inCidr(ip, lane.serviceCidr), `ClusterIP ${ip} in ${lane.serviceCidr}`);
    const apiUrl = `http://${ip}:3000`;
    const admin = async (path: string, body: unknown) => {
      const r = await fetch(`${apiUrl}/admin/api/v1${path}`, { method: "POST", headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      assert.equal(r.status, 201, `${path}: ${r.status} ${await r.clone().text()}`);
      return (await r.json()) as Record<string, unknown>;
    };
    const tenant = await admin("/tenants", { name: "kubelet-lane" });
    const { key } = await admin(`/tenants/${String(tenant.id)}/keys`, {});
    const opts: ConnectionOpts & { sandboxUrl: string } = { apiKey: String(key), apiUrl, sandboxUrl: `http://${ip}:3001`, requestTimeoutMs: 300_000 };
    const t0 = Date.now();
    const sb = await Sandbox.create({ ...opts, timeoutMs: 300_000 });
    process.stdout.write(`# SDK create through the Service on the kubelet lane: ${Date.now() - t0} ms\n`);
    try {
      const r = await sb.commands.run("echo hello-from-$(id -un) && cat /proc/1/cgroup | head -1");
      assert.equal(r.exitCode, 0);
      assert.match(r.stdout, /^hello-from-user\n/);
      const p = await kube().request<Pod>("GET", `/api/v1/namespaces/${SANDBOX_NS}/pods/${podNameOf(sb.sandboxId)}`);
      assert.notEqual(p.spec.nodeName, lane.nodeName, "bound to the agent's virtual Node, not the kubelet's");
      assert.ok(ready(p));
    } finally {
      await sb.kill();
    }
    await waitFor(async () => ((await pods(SANDBOX_NS, "")).length === 0 ? true : undefined), "the sandbox pod gone", 60_000, 500);
  });
});
