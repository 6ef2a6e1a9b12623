/**
 * SPACE on the Kubernetes substrate, for end-to-end tests and the bench: a real
 * kube-apiserver + kube-scheduler + etcd (./cluster.ts), `space api` and `space
 * controller` with SPACE_SUBSTRATE=kubernetes on one Postgres database, and N real
 * `space node` agents (runc, btrfs, netns) that register as Nodes in the apiserver and
 * play kubelet for the sandbox pods bound to them. Each node has its own host scope
 * (bridge, nft table, veth prefix, cgroup parent, runtime state, slot range, node dir).
 * `substrate: "direct"` starts the same processes as a Direct fleet instead (nodes
 * register with the API; no cluster), the baseline the bench compares against.
 *
 *   const f = await startKubeFleet({ nodes: 3 });
 *   f.apiUrl, f.apiKey, f.adminToken, f.cluster?.kube, f.nodes[i].name (= Node name / node id)
 *   await f.stop();
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freshDb, type TestDb } from "../support/db.ts";
import { runSpace, type SpaceProcess } from "../support/space-process.ts";
import { removeNodeContainers, removeNodeNetwork } from "../support/node-network-cleanup.ts";
import { freePort, hostScopeFor, nodeNetworkOf, removeDataDir } from "../support/stack.ts";
import { startCluster, type TestCluster } from "./cluster.ts";

export interface KubeFleetNode {
  /** The Node's name in the apiserver (the node agent's id). */
  name: string;
  group: string;
  port: number;
  dataDir: string;
  env: Record<string, string>;
  proc: SpaceProcess;
}

export interface KubeFleet {
  /** Absent on Direct. */
  cluster: TestCluster | undefined;
  db: TestDb;
  apiUrl: string;
  gatewayUrl: string;
  apiKey: string;
  adminToken: string;
  api: SpaceProcess;
  controller: SpaceProcess;
  nodes: KubeFleetNode[];
  /** Sandbox pods live here. */
  namespace: string;
  admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }>;
  stop(): Promise<void>;
}

export interface KubeFleetOptions {
  nodes: number;
  /** kubernetes (default) or direct (the same processes without a cluster). */
  substrate?: "kubernetes" | "direct";
  /** Extra SPACE_* variables for api and controller. */
  env?: Record<string, string>;
}

const NAMESPACE = "space-sandboxes";

export async function startKubeFleet(opts: KubeFleetOptions): Promise<KubeFleet> {
  const adminToken = `adm_${randomBytes(12).toString("hex")}`;
  const internal = `int_${randomBytes(12).toString("hex")}`;
  const run = randomBytes(3).toString("hex");
  const ctlDir = mkdtempSync(join(tmpdir(), "space-kfleet-ctl-"));
  const nodes: KubeFleetNode[] = [];
  let cluster: TestCluster | undefined;
  let db: TestDb | undefined;
  let api: SpaceProcess | undefined;
  let controller: SpaceProcess | undefined;
  let apiUrl = "";

  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${apiUrl}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };

  const stop = async () => {
    for (const n of nodes) await n.proc.stop();
    await controller?.stop();
    await api?.stop();
    for (const n of nodes) {
      removeNodeContainers(n.env.SPACE_RUNTIME ?? "runc", n.env.SPACE_NODE_RUNTIME_STATE_DIR!);
      removeNodeNetwork(nodeNetworkOf(n.env));
      removeDataDir(n.dataDir);
    }
    removeDataDir(ctlDir);
    await db?.drop();
    await cluster?.stop();
  };

  const kube = (opts.substrate ?? "kubernetes") === "kubernetes";
  try {
    if (kube) cluster = await startCluster();
    db = await freshDb("postgres");
    const [apiPort, gwPort] = [await freePort(), await freePort()];
    apiUrl = `http://127.0.0.1:${apiPort}`;
    const common = {
      ...(cluster ? { SPACE_SUBSTRATE: "kubernetes", SPACE_KUBE_CONFIG: cluster.kubeconfigPath, SPACE_KUBE_NAMESPACE: NAMESPACE } : { SPACE_SUBSTRATE: "direct" }),
      SPACE_BLOB_URL: join(ctlDir, "blobs"),
      SPACE_INTERNAL_TOKEN: internal,
      SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "info",
    };
    const cp = { ...common, SPACE_DATABASE_URL: db.url, SPACE_ADMIN_TOKEN: adminToken, SPACE_DATA_DIR: ctlDir, ...opts.env };
    api = runSpace(["api"], { ...cp, SPACE_API_PORT: String(apiPort), SPACE_GATEWAY_PORT: String(gwPort) });
    controller = runSpace(["controller"], cp);
    for (let i = 0; i < opts.nodes; i++) {
      const dataDir = mkdtempSync(join(tmpdir(), `space-kfleet-n${i}-`));
      const port = await freePort();
      const env = {
        ...common,
        ...hostScopeFor(dataDir),
        SPACE_DATA_DIR: dataDir,
        SPACE_NODE_DIR: join(dataDir, "node"),
        SPACE_NODE_PORT: String(port),
        SPACE_NODE_NAME: `kfleet-${i}-${run}`,
        SPACE_NODE_GROUP: `kg${i}`,
        SPACE_NODE_LABELS: `kfleet=n${i},run=${run}`,
        SPACE_NODE_HEARTBEAT_MS: "3000",
        SPACE_NODE_BTRFS_IMAGE_GIB: "8",
        SPACE_NODE_MAX_SLOTS: "20",
        ...(kube ? {} : { SPACE_NODE_CONTROL_URL: apiUrl }),
      };
      nodes.push({ name: "", group: `kg${i}`, port, dataDir, env, proc: runSpace(["node"], env) });
    }
    // Generous: the first start migrates a fresh database, and this machine may be busy.
    await Promise.all([api.waitFor("api listening", 180_000), controller.waitFor("controller elected leader", 180_000)]);
    await Promise.all(
      nodes.map(async (n) => {
        const line = await n.proc.waitFor(kube ? /is up as Kubernetes node \S+/ : /SPACE node \S+ is up at/, 180_000);
        n.name = kube ? line.split(" ").pop()! : line.split(" ")[2]!;
      }),
    );
    const tenant = await admin("POST", "/tenants", { name: `kfleet-${run}` });
    const key = await admin("POST", `/tenants/${String(tenant.body.id)}/keys`, {});
    const apiKey = String(key.body.key ?? "");
    if (!apiKey) throw new Error(`no api key: ${JSON.stringify(tenant.body)} ${JSON.stringify(key.body)}`);
    return { cluster, db, apiUrl, gatewayUrl: `http://127.0.0.1:${gwPort}`, apiKey, adminToken, api, controller, nodes, namespace: NAMESPACE, admin, stop };
  } catch (e) {
    const tails = [api, controller, ...nodes.map((n) => n.proc)].map((p) => p?.out().slice(-1500) ?? "").join("\n---\n");
    await stop();
    throw new Error(`${e instanceof Error ? e.message : String(e)}\n${tails}`);
  }
}
