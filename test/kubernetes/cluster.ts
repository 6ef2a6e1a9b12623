/**
 * A real Kubernetes control plane for tests: embedded etcd, kube-apiserver and
 * kube-scheduler from the binary `scripts/setup/k8s.sh` builds from the official Go
 * modules (.tools/k8s/<version>/space-k8s). No kubelet, controller-manager or images:
 * SPACE node agents are the kubelets (`forKubelet` prepares it for the real ones of
 * ./kubelet-node.ts instead). Tests skip with `k8sSkipReason` when the binary is absent.
 *
 *   const c = await startCluster();   // ~5 s
 *   c.kube (KubeApi, admin), c.kubeconfigPath
 *   await c.stop();
 */
import { spawn, type ChildProcess } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createKubeApi, isConflict, type KubeApi } from "../../src/kube/kube-api.ts";
import { freePort, waitFor } from "../support/stack.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const VERSION = /const version = "(.*)"/.exec(readFileSync(join(ROOT, "scripts/setup/k8s/version.go"), "utf8"))![1]!;
export const K8S_BIN = join(ROOT, ".tools", "k8s", VERSION, "space-k8s");
export const k8sSkipReason: string | false = existsSync(K8S_BIN)
  ? false
  : `no kube-apiserver/kube-scheduler binary at ${K8S_BIN}: run scripts/setup/k8s.sh (builds them from the Go modules, ~25 min once)`;

export interface TestCluster {
  server: string;
  kubeconfigPath: string;
  kube: KubeApi;
  dir: string;
  /** The apiserver's CA (its self-signed certificate) and the admin bearer token. */
  caPath: string;
  token: string;
  /** The service-account signing key (for kube-controller-manager). */
  saKeyPath: string;
  /** Appends to the apiserver's and scheduler's logs (for failures). */
  logs(): string;
  stop(): Promise<void>;
}

const TOKEN = "space-test-admin-token";

export interface ClusterOptions {
  scheduler?: boolean;
  /**
   * For real kubelets and pods: the apiserver listens on and advertises `address` (an
   * address pods reach; default 127.0.0.1), serves `serviceCidr` as ClusterIPs, keeps
   * the `kubernetes` Service's endpoints (lease reconciler) and admits service accounts
   * (kube-controller-manager makes them).
   */
  forKubelet?: { address: string; serviceCidr: string };
}

export async function startCluster(opts: ClusterOptions = {}): Promise<TestCluster> {
  const dir = mkdtempSync(join(tmpdir(), "space-k8s-"));
  const procs: ChildProcess[] = [];
  const logs: Record<string, string> = {};
  const run = (name: string, args: string[]) => {
    const p = spawn(K8S_BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
    logs[name] = "";
    const add = (b: Buffer) => {
      logs[name] = (logs[name]! + b.toString()).slice(-20_000);
    };
    p.stdout!.on("data", add);
    p.stderr!.on("data", add);
    procs.push(p);
    return p;
  };
  const stop = async () => {
    for (const p of procs.reverse()) {
      if (p.exitCode !== null || p.signalCode !== null) continue;
      const exited = new Promise((r) => p.once("exit", r));
      p.kill("SIGTERM");
      const t = setTimeout(() => p.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const address = opts.forKubelet?.address ?? "127.0.0.1";
  try {
    const [etcdPort, peerPort, apiPort, schedPort] = await distinctFreePorts(4);
    const { publicKey, privateKey } = generateKeyPairSync("rsa", {
      modulusLength: 2048,
      publicKeyEncoding: { type: "spki", format: "pem" },
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
    });
    writeFileSync(join(dir, "sa.pub"), publicKey);
    writeFileSync(join(dir, "sa.key"), privateKey, { mode: 0o600 });
    writeFileSync(join(dir, "tokens.csv"), `${TOKEN},admin,admin-uid,"system:masters"\n`, { mode: 0o600 });
    mkdirSync(join(dir, "certs"));
    run("etcd", ["etcd", "--data-dir", join(dir, "etcd"), "--listen-client", `http://127.0.0.1:${etcdPort}`, "--listen-peer", `http://127.0.0.1:${peerPort}`]);
    run("apiserver", [
      "apiserver",
      `--etcd-servers=http://127.0.0.1:${etcdPort}`,
      `--secure-port=${apiPort}`,
      `--bind-address=${address}`,
      `--advertise-address=${address}`,
      `--cert-dir=${join(dir, "certs")}`,
      `--token-auth-file=${join(dir, "tokens.csv")}`,
      "--authorization-mode=RBAC",
      "--service-account-issuer=https://kubernetes.default.svc",
      `--service-account-key-file=${join(dir, "sa.pub")}`,
      `--service-account-signing-key-file=${join(dir, "sa.key")}`,
      `--service-cluster-ip-range=${opts.forKubelet?.serviceCidr ?? "10.250.0.0/24"}`,
      // No controller-manager: no default service accounts to admit against, no endpoints,
      // and no node lifecycle controller to lift the not-ready taint admission would add.
      // With one (forKubelet), only the taint stays off: SPACE's virtual Nodes are Ready
      // from their first status, so a not-ready taint would only delay their first pods.
      ...(opts.forKubelet
        ? ["--disable-admission-plugins=TaintNodesByCondition"]
        : ["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition", "--endpoint-reconciler-type=none"]),
      "--event-ttl=10m",
      // As clusters that run node agents (privileged DaemonSets) are configured.
      "--allow-privileged=true",
    ]);
    const server = `https://${address}:${apiPort}`;
    const ca = join(dir, "certs", "apiserver.crt");
    await waitFor(() => existsSync(ca) || undefined, "apiserver certificate", 60_000, 200);
    const kubeconfigPath = join(dir, "kubeconfig");
    writeFileSync(
      kubeconfigPath,
      [
        "apiVersion: v1",
        "kind: Config",
        `clusters: [{name: t, cluster: {server: "${server}", certificate-authority: "${ca}"}}]`,
        `users: [{name: admin, user: {token: ${TOKEN}}}]`,
        "contexts: [{name: t, context: {cluster: t, user: admin}}]",
        "current-context: t",
        "",
      ].join("\n"),
      { mode: 0o600 },
    );
    const kube = createKubeApi({ kind: "kubeconfig", path: kubeconfigPath });
    await waitFor(
      async () => (await kube.request<string>("GET", "/readyz").then(() => true, () => false)) || undefined,
      `kube-apiserver ready (${logs.apiserver?.slice(-500)})`,
      60_000,
      250,
    );
    if (opts.scheduler !== false) {
      run("scheduler", [
        "scheduler",
        `--kubeconfig=${kubeconfigPath}`,
        `--authentication-kubeconfig=${kubeconfigPath}`,
        `--authorization-kubeconfig=${kubeconfigPath}`,
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        `--secure-port=${schedPort}`,
      ]);
    }
    // What `deploy/` installs in a real cluster: the namespaces and the RuntimeClass
    // (with real kubelets the chart under test installs them itself).
    if (!opts.forKubelet) for (const ns of ["space-sandboxes", "kube-node-lease"]) await ensure(kube, "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
    if (!opts.forKubelet) await ensure(kube, "/apis/node.k8s.io/v1/runtimeclasses", { apiVersion: "node.k8s.io/v1", kind: "RuntimeClass", metadata: { name: "space" }, handler: "space" });
    return { server, kubeconfigPath, kube, dir, caPath: ca, token: TOKEN, saKeyPath: join(dir, "sa.key"), logs: () => Object.entries(logs).map(([k, v]) => `--- ${k}\n${v.slice(-3000)}`).join("\n"), stop };
  } catch (e) {
    const tail = Object.entries(logs).map(([k, v]) => `--- ${k}\n${v.slice(-2000)}`).join("\n");
    await stop();
    throw new Error(`${e instanceof Error ? e.message : String(e)}\n${tail}`);
  }
}

async function ensure(kube: KubeApi, path: string, body: unknown): Promise<void> {
  try {
    await kube.request("POST", path, { body });
  } catch (e) {
    if (!isConflict(e)) throw e;
  }
}

/** `n` free ports, no two alike (the kernel may hand a just-closed port out again). */
async function distinctFreePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}
