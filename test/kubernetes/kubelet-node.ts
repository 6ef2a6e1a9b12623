/**
 * A real Kubernetes node for the test control plane: kube-controller-manager, a kubelet
 * with its own containerd (Debian's; root, state and socket under the lane's directory),
 * the CNI reference plugins (Debian's containernetworking-plugins: bridge + host-local +
 * loopback) and kube-proxy in nftables mode, all from `scripts/setup/k8s-node.sh` (built
 * from the Go modules like the apiserver) beside ./cluster.ts's etcd + apiserver +
 * scheduler. Everything host-wide is this lane's own and removed on stop: the pod bridge
 * (its gateway address is the node's address, which pods reach the apiserver, Postgres and
 * S3 at), the route of the Service range (onto that bridge, so a ClusterIP kube-proxy did
 * not translate never leaves the machine), kube-proxy's nftables tables, the kubelet's
 * cgroup root, and the lane directory (a shared bind mount: Bidirectional hostPaths need one).
 *
 *   const lane = await startKubeletLane();
 *   lane.cluster.kube, lane.nodeName, lane.nodeIp, lane.ctr(...args)
 *   await lane.stop();
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { ipToInt, intToIp } from "../../src/core/cidr.ts";
import { freePort, removeDataDir, waitFor } from "../support/stack.ts";
import { pickSlotRange } from "../support/node-network-cleanup.ts";
import { startCluster, type TestCluster } from "./cluster.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const CNI_BIN = "/usr/lib/cni";
export const PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1";

/** Why the lane cannot run here, or false. */
export function kubeletLaneSkipReason(): string | false {
  if (process.getuid?.() !== 0) return "a kubelet with containerd needs root";
  if (spawnSync("containerd", ["--version"]).status !== 0) return "no containerd on PATH: scripts/setup/kubelet-host.sh installs Debian's";
  for (const p of ["bridge", "host-local", "loopback"]) if (!existsSync(join(CNI_BIN, p))) return `no CNI plugin ${CNI_BIN}/${p}: scripts/setup/kubelet-host.sh installs containernetworking-plugins`;
  if (spawnSync("conntrack", ["--version"]).status !== 0) return "no conntrack (kube-proxy needs it): scripts/setup/kubelet-host.sh installs it";
  return false;
}

export interface KubeletLane {
  cluster: TestCluster;
  /** The kubelet's Node. */
  nodeName: string;
  /** The node's address: the pod bridge's gateway, reachable from pods and from this host. */
  nodeIp: string;
  podCidr: string;
  serviceCidr: string;
  /** The lane's directory (a shared mount): put hostPaths of pods under it. */
  dir: string;
  /** `ctr` against this lane's containerd, in the k8s.io namespace. */
  ctr(...args: string[]): string;
  logs(): string;
  /** Every pod's phase and conditions, the latest events and the tail of each container's log (for failures). */
  diagnose(): Promise<string>;
  stop(): Promise<void>;
}

interface Proc {
  name: string;
  child: ChildProcess;
  /** Its output file. */
  log: string;
}

function sh(argv: string[], what = argv.join(" ")): string {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8", timeout: 600_000 });
  if (r.status !== 0) throw new Error(`${what}: exit ${r.status ?? r.signal}: ${r.stdout}${r.stderr}`);
  return r.stdout;
}

/** The node binary (built or taken from the cache by scripts/setup/k8s-node.sh) and the pause image archive beside it. */
export function nodeTools(): { bin: string; pauseArchive: string } {
  const bin = sh(["bash", join(ROOT, "scripts/setup/k8s-node.sh")]).trim().split("\n").pop()!;
  return { bin, pauseArchive: join(bin, "..", "pause.oci.tar") };
}

export async function startKubeletLane(): Promise<KubeletLane> {
  const { bin, pauseArchive } = nodeTools();
  const tag = randomBytes(3).toString("hex");
  const dir = mkdtempSync("/tmp/space-kubelet-");
  const procs: Proc[] = [];
  const cleanups: Array<() => void | Promise<void>> = [];
  const nodeName = `kubelet-${tag}`;
  const bridge = `kb${tag}`;
  const cgroupRoot = `space-kubelet-${tag}`;
  let cluster: TestCluster | undefined;

  // Each process logs to its own file, not a pipe: a pipe nobody drains (this process
  // blocked in a long synchronous call) would stop the component on its next log line.
  const logDir = join(dir, "logs");
  const run = (name: string, argv: string[]) => {
    // kube-proxy runs nft, the kubelet mount/iptables: the sbin directories may be off this PATH.
    const env = { ...process.env, PATH: `/usr/local/sbin:/usr/sbin:/sbin:${process.env.PATH ?? "/usr/bin:/bin"}` };
    mkdirSync(logDir, { recursive: true });
    const log = join(logDir, `${name}.log`);
    const fd = openSync(log, "a");
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", fd, fd], env });
    closeSync(fd);
    const p: Proc = { name, child, log };
    procs.push(p);
    return p;
  };
  const tail = (p: Proc, n: number) => {
    try {
      const b = readFileSync(p.log);
      return b.subarray(Math.max(0, b.length - n)).toString();
    } catch {
      return "";
    }
  };
  const alive = (p: Proc) => p.child.exitCode === null && p.child.signalCode === null;
  const halt = async (p: Proc) => {
    if (!alive(p)) return;
    const exited = new Promise((r) => p.child.once("exit", r));
    p.child.kill("SIGTERM");
    const t = setTimeout(() => p.child.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(t);
  };
  const logs = () => [...procs.map((p) => `--- ${p.name}\n${tail(p, 4000)}`), cluster?.logs() ?? ""].join("\n");
  const sock = join(dir, "containerd", "containerd.sock");
  const ctr = (...args: string[]) => sh(["ctr", "--address", sock, "--namespace", "k8s.io", ...args]);

  const stop = async () => {
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch (e) {
        process.stderr.write(`kubelet lane cleanup: ${e instanceof Error ? e.message : String(e)}\n`);
      }
    }
    cleanups.length = 0;
  };

  try {
    // Bidirectional hostPaths (the node agent's) must live on a shared mount; `/` is private here.
    sh(["mount", "--bind", dir, dir]);
    sh(["mount", "--make-rshared", dir]);
    cleanups.push(() => removeDataDir(dir));

    // The pod network: a bridge whose gateway is the node's address, and a /24 no route holds.
    const podCidr = pickSlotRange(`${dir}/pods`, bridge);
    const nodeIp = intToIp(ipToInt(podCidr.split("/")[0]!) + 1);
    sh(["ip", "link", "add", bridge, "type", "bridge"]);
    cleanups.push(() => void spawnSync("ip", ["link", "del", bridge]));
    sh(["ip", "addr", "add", `${nodeIp}/24`, "dev", bridge]);
    sh(["ip", "link", "set", bridge, "up"]);
    const serviceCidr = pickSlotRange(`${dir}/services`, `kv${tag}`);
    // Goes with the bridge. kube-proxy rewrites ClusterIPs before this route sends anything.
    sh(["ip", "route", "add", serviceCidr, "dev", bridge]);

    cluster = await startCluster({ forKubelet: { address: nodeIp, serviceCidr } });
    const c = cluster;
    cleanups.push(() => c.stop());

    // containerd: its own root, state, socket and CNI config.
    const cdir = join(dir, "containerd");
    const cniConf = join(dir, "cni", "net.d");
    mkdirSync(cniConf, { recursive: true });
    mkdirSync(cdir, { recursive: true });
    writeFileSync(
      join(cniConf, "10-space-kubelet.conflist"),
      JSON.stringify({
        cniVersion: "1.0.0",
        name: `space-kubelet-${tag}`,
        plugins: [
          {
            type: "bridge",
            bridge,
            isGateway: true,
            // No masquerade: pods reach this host only, never anything beyond it.
            ipMasq: false,
            hairpinMode: true,
            // Routes to the pod range (on link) and the Service range (via the node, where
            // kube-proxy translates it); no default route.
            ipam: { type: "host-local", ranges: [[{ subnet: podCidr, gateway: nodeIp }]], routes: [{ dst: serviceCidr }], dataDir: join(dir, "cni", "ipam") },
          },
        ],
      }),
    );
    writeFileSync(
      join(cdir, "config.toml"),
      [
        "version = 2",
        `root = "${join(cdir, "root")}"`,
        `state = "${join(cdir, "state")}"`,
        `[grpc]`,
        `  address = "${sock}"`,
        `[ttrpc]`,
        `  address = "${sock}.ttrpc"`,
        `[plugins."io.containerd.grpc.v1.cri"]`,
        `  sandbox_image = "${PAUSE_IMAGE}"`,
        // Root here lacks CAP_SYS_RESOURCE: a pod's oom_score_adj below the runtime's own fails runc create.
        `  restrict_oom_score_adj = true`,
        `  stream_server_address = "127.0.0.1"`,
        `  stream_server_port = "0"`,
        `  [plugins."io.containerd.grpc.v1.cri".cni]`,
        `    bin_dir = "${CNI_BIN}"`,
        `    conf_dir = "${cniConf}"`,
        `  [plugins."io.containerd.grpc.v1.cri".containerd]`,
        `    snapshotter = "overlayfs"`,
        `    default_runtime_name = "runc"`,
        `    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
        `      runtime_type = "io.containerd.runc.v2"`,
        "",
      ].join("\n"),
    );
    const containerd = run("containerd", ["containerd", "--config", join(cdir, "config.toml")]);
    cleanups.push(() => halt(containerd));
    await waitFor(() => (spawnSync("ctr", ["--address", sock, "version"]).status === 0 ? true : alive(containerd) ? undefined : Promise.reject(new Error(`containerd exited: ${tail(containerd, 2000)}`))), "containerd answers", 60_000, 200);
    ctr("images", "import", pauseArchive);
    if (!ctr("images", "ls", "-q").split("\n").includes(PAUSE_IMAGE)) throw new Error(`${pauseArchive} did not import as ${PAUSE_IMAGE}: ${ctr("images", "ls", "-q")}`);

    // kube-controller-manager: Deployments, ReplicaSets, DaemonSets, Jobs, EndpointSlices,
    // service accounts and each namespace's kube-root-ca.crt (what pods' tokens need).
    const [cmPort, kubeletPort, kubeletHealthz, proxyHealthz, proxyMetrics] = await distinctFreePorts(5);
    const kc = c.kubeconfigPath;
    const cm = run("controller-manager", [
      bin, "controller-manager",
      `--kubeconfig=${kc}`, `--authentication-kubeconfig=${kc}`, `--authorization-kubeconfig=${kc}`,
      "--leader-elect=false", "--bind-address=127.0.0.1", `--secure-port=${cmPort}`,
      `--service-account-private-key-file=${c.saKeyPath}`, `--root-ca-file=${c.caPath}`,
      "--use-service-account-credentials=false",
      // No cloud, no node CIDRs (host-local has the pod range), no routes.
      "--controllers=*,-nodeipam,-route,-cloud-node-lifecycle,-service",
    ]);
    cleanups.push(() => halt(cm));

    // The kubelet's cgroup root, in each v1 hierarchy (or the one v2 tree).
    const cgroupDirs = cgroupHierarchies().map((h) => join(h, cgroupRoot));
    for (const d of cgroupDirs) mkdirSync(d, { recursive: true });
    cleanups.push(() => cgroupDirs.forEach(removeCgroupTree));
    const kubeletConfig = join(dir, "kubelet.yaml");
    writeFileSync(
      kubeletConfig,
      JSON.stringify({
        apiVersion: "kubelet.config.k8s.io/v1beta1",
        kind: "KubeletConfiguration",
        // This machine has cgroup v1; kubelet 1.35 refuses it unless told (named in docs/operations.md).
        failCgroupV1: false,
        cgroupDriver: "cgroupfs",
        cgroupRoot: `/${cgroupRoot}`,
        containerRuntimeEndpoint: `unix://${sock}`,
        address: nodeIp,
        port: kubeletPort,
        readOnlyPort: 0,
        healthzBindAddress: "127.0.0.1",
        healthzPort: kubeletHealthz,
        authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: {} },
        authorization: { mode: "Webhook" },
        failSwapOn: false,
        maxPods: 30,
        // A shared test machine: never evict or collect images for disk held by others.
        evictionHard: { "memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%" },
        imageGCHighThresholdPercent: 100,
        imageGCLowThresholdPercent: 99,
        serializeImagePulls: false,
        resolvConf: "/etc/resolv.conf",
        podLogsDir: join(dir, "pod-logs"),
      }),
    );
    const kubelet = run("kubelet", [
      bin, "kubelet",
      `--config=${kubeletConfig}`, `--kubeconfig=${kc}`,
      `--root-dir=${join(dir, "kubelet")}`, `--cert-dir=${join(dir, "kubelet-pki")}`,
      `--node-ip=${nodeIp}`, `--hostname-override=${nodeName}`,
      "--node-labels=space.dev/host=true",
    ]);
    cleanups.push(async () => {
      // Pods first (the kubelet tears their containers and networks down), then the kubelet.
      await deleteAllPods(c, nodeName).catch((e: unknown) => process.stderr.write(`kubelet lane: pods not all gone: ${String(e)}\n`));
      await halt(kubelet);
      // Whatever is left (a kubelet that died): containers, then their pod sandboxes.
      for (const id of ctrIds(ctr, "tasks")) spawnSync("ctr", ["--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id]);
      for (const id of ctrIds(ctr, "tasks")) spawnSync("ctr", ["--address", sock, "-n", "k8s.io", "tasks", "delete", "-f", id]);
      for (const id of ctrIds(ctr, "containers")) spawnSync("ctr", ["--address", sock, "-n", "k8s.io", "containers", "delete", id]);
      removeKubeletIptables();
    });

    const proxyConfig = join(dir, "kube-proxy.yaml");
    writeFileSync(
      proxyConfig,
      JSON.stringify({
        apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
        kind: "KubeProxyConfiguration",
        mode: "nftables",
        clientConnection: { kubeconfig: kc },
        hostnameOverride: nodeName,
        bindAddress: nodeIp,
        healthzBindAddress: `127.0.0.1:${proxyHealthz}`,
        metricsBindAddress: `127.0.0.1:${proxyMetrics}`,
        clusterCIDR: podCidr,
        detectLocalMode: "ClusterCIDR",
        // Leave the machine's conntrack sysctls as they are (0 = do not set).
        conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
        nodePortAddresses: [`${nodeIp}/32`],
      }),
    );
    const proxy = run("kube-proxy", [bin, "proxy", `--config=${proxyConfig}`]);
    cleanups.push(async () => {
      await halt(proxy);
      // Removes its nftables tables (ip and ip6 kube-proxy).
      spawnSync(bin, ["proxy", "--cleanup", `--config=${proxyConfig}`]);
    });

    await waitFor(
      async () => {
        for (const p of [containerd, cm, kubelet, proxy]) if (!alive(p)) throw new Error(`${p.name} exited ${p.child.exitCode ?? p.child.signalCode}:\n${tail(p, 3000)}`);
        const n = await c.kube.request<{ status?: { conditions?: Array<{ type: string; status: string }> } }>("GET", `/api/v1/nodes/${nodeName}`).catch(() => undefined);
        return n?.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True") || undefined;
      },
      `kubelet Node ${nodeName} Ready`,
      180_000,
      500,
    );
    const diagnose = async () => {
      type Item = { metadata: { namespace: string; name: string }; status?: unknown; spec?: { nodeName?: string } };
      const pods = await c.kube.request<{ items: Item[] }>("GET", "/api/v1/pods").catch((e: unknown) => ({ items: [], error: String(e) }));
      const events = await c.kube.request<{ items: Array<{ involvedObject: { name: string }; reason: string; message?: string }> }>("GET", "/api/v1/events").catch(() => ({ items: [] }));
      const lines = pods.items.map((p) => `pod ${p.metadata.namespace}/${p.metadata.name} on ${p.spec?.nodeName ?? "-"}: ${JSON.stringify(p.status).slice(0, 1500)}`);
      lines.push(...events.items.slice(-40).map((e) => `event ${e.involvedObject.name} ${e.reason}: ${(e.message ?? "").slice(0, 400)}`));
      const logDir = join(dir, "pod-logs");
      for (const pod of existsSync(logDir) ? readdirSync(logDir) : [])
        for (const ctn of readdirSync(join(logDir, pod)))
          for (const f of readdirSync(join(logDir, pod, ctn))) lines.push(`log ${pod}/${ctn}/${f}:\n${sh(["tail", "-c", "3000", join(logDir, pod, ctn, f)])}`);
      return lines.join("\n");
    };
    return { cluster: c, nodeName, nodeIp, podCidr, serviceCidr, dir, ctr, logs, diagnose, stop };
  } catch (e) {
    const tail = logs();
    await stop();
    throw new Error(`${e instanceof Error ? e.message : String(e)}\n${tail}`);
  }
}

/**
 * The kubelet's own iptables chains (it makes them whatever kube-proxy's mode): the
 * localnet guard KUBE-FIREWALL and its canaries. The lane's kubelet is the only one here.
 */
function removeKubeletIptables(): void {
  for (const tool of ["iptables", "ip6tables"]) {
    const t = (...a: string[]) => spawnSync(tool, ["-w", ...a]);
    t("-D", "INPUT", "-j", "KUBE-FIREWALL");
    t("-D", "OUTPUT", "-j", "KUBE-FIREWALL");
    t("-F", "KUBE-FIREWALL");
    t("-X", "KUBE-FIREWALL");
    for (const table of ["filter", "nat", "mangle"]) t("-t", table, "-X", "KUBE-KUBELET-CANARY");
    t("-t", "mangle", "-X", "KUBE-IPTABLES-HINT");
  }
}

/** Deletes every pod bound to the node (any namespace) and waits until the apiserver has none. */
async function deleteAllPods(c: TestCluster, nodeName: string): Promise<void> {
  type PodList = { items: Array<{ metadata: { name: string; namespace: string } }> };
  const list = () => c.kube.request<PodList>("GET", "/api/v1/pods", { query: { fieldSelector: `spec.nodeName=${nodeName}` } });
  for (const p of (await list()).items) await c.kube.request("DELETE", `/api/v1/namespaces/${p.metadata.namespace}/pods/${p.metadata.name}`).catch(() => {});
  await waitFor(async () => ((await list()).items.length === 0 ? true : undefined), `pods on ${nodeName} gone`, 120_000, 500);
}

function ctrIds(ctr: (...a: string[]) => string, what: "tasks" | "containers"): string[] {
  try {
    return ctr(what, "ls", "-q").split("\n").map((s) => s.trim()).filter(Boolean);
  } catch {
    return [];
  }
}

/** Mount points of the cgroup hierarchies: each v1 controller's, or the v2 root. */
function cgroupHierarchies(): string[] {
  if (existsSync("/sys/fs/cgroup/cgroup.controllers")) return ["/sys/fs/cgroup"];
  return readdirSync("/sys/fs/cgroup", { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join("/sys/fs/cgroup", d.name, "cgroup.procs")))
    .map((d) => join("/sys/fs/cgroup", d.name));
}

/** rmdir a cgroup and its children, deepest first (a cgroup dir holds only kernel files). */
function removeCgroupTree(d: string): void {
  if (!existsSync(d)) return;
  for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(d, e.name));
  try {
    rmdirSync(d);
  } catch {
    /* still has tasks: the kubelet's own QoS cgroups go when their last process does */
  }
}

async function distinctFreePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}
