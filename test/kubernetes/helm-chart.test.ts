/**
 * The Helm chart (deploy/helm/space) against a real kube-apiserver: `helm lint`, the plain
 * manifests in deploy/ being exactly its render, `helm install` / `helm upgrade` /
 * `helm uninstall` through the apiserver, and a render with every option on (hooks, PDBs,
 * wildcard Ingress with TLS, ServiceMonitor, created Secrets) applied object by object.
 * No kubelet or controller-manager here: workloads and Jobs are stored, not run; what the
 * manifests' RBAC lets SPACE do is proven by substrate.test.ts on deploy/space.yaml.
 * helm is built from its Go module by scripts/setup/helm.sh (cached like the apiserver).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { KubernetesObjectApi, loadAllYaml } from "@kubernetes/client-node";
import { loadConfig } from "../../src/core/config.ts";
import { isNotFound, kubeConfigOf } from "../../src/kube/kube-api.ts";
import { k8sSkipReason, startCluster, type TestCluster } from "./cluster.ts";
import { waitFor } from "../support/stack.ts";

const skip = k8sSkipReason;
const CHART = "deploy/helm/space";
const NS = "space-system";

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}
interface Container {
  name: string;
  command?: string[];
  image?: string;
  env?: Array<{ name: string; value?: string; valueFrom?: unknown }>;
  envFrom?: Array<{ secretRef?: { name: string } }>;
}

let cluster: TestCluster;
let helmBin = "";

function run(cmd: string, args: string[], env: Record<string, string> = {}): string {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 300_000, env: { ...process.env, ...env } });
  assert.equal(r.status, 0, `${cmd} ${args.join(" ")}: ${r.stdout}\n${r.stderr}`);
  return r.stdout;
}
const helm = (...args: string[]) => run(helmBin, [...args, "--kubeconfig", cluster.kubeconfigPath]);
// Plain objects (loadAllYaml makes the client's model classes of known kinds).
const render = (...args: string[]) => JSON.parse(JSON.stringify(loadAllYaml(run(helmBin, ["template", "space", CHART, "--namespace", NS, ...args])))) as Obj[];
const byKind = (docs: Obj[], kind: string) => docs.filter((d) => d.kind === kind);
const podSpecOf = (d: Obj) => (d.spec as { template: { spec: { containers: Container[] } } }).template.spec;
const required = ["--set", "database.url=postgres://space:pw@db:5432/space", "--set", "blob.url=s3://space-blobs/prod", "--set", "blob.s3.accessKeyId=AKID", "--set", "blob.s3.secretAccessKey=SECRET"];

before(async () => {
  if (skip) return;
  helmBin = run("bash", ["scripts/setup/helm.sh"]).trim().split("\n").pop()!;
  cluster = await startCluster({ scheduler: false });
});
after(async () => {
  await cluster?.stop();
});

test("helm lint passes (strict) with the required values, and a render without them names the missing value", { skip }, () => {
  run(helmBin, ["lint", CHART, "--strict", ...required]);
  run(helmBin, ["lint", CHART, "--strict", "-f", "deploy/helm/manifests.values.yaml"]);
  const r = spawnSync(helmBin, ["template", "space", CHART], { encoding: "utf8" });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /database\.url is required/);
});

test("deploy/space.yaml is the chart rendered with deploy/helm/manifests.values.yaml", { skip }, () => {
  run("bash", ["scripts/deploy-manifests.sh", "--check"], { SPACE_HELM: helmBin });
});

test("the full render: hooks before the API, Secrets split by who needs what, wildcard Ingress with TLS, PDBs, valid SPACE_* settings", { skip }, () => {
  const docs = render(
    ...required,
    "--set", "sandboxDomain=sbx.example.com",
    "--set", "ingress.enabled=true", "--set", "ingress.apiHost=api.example.com", "--set", "ingress.className=nginx",
    "--set", "ingress.tls.enabled=true", "--set", "ingress.tls.secretName=space-tls",
    "--set", "serviceMonitor.enabled=true",
    "--set", "image.repository=registry.example.com/space", "--set", "image.tag=abc",
    "--set", "node.tolerations[0].key=space.dev/host", "--set", "node.tolerations[0].operator=Exists",
  );
  // The migration Job is a pre-install/pre-upgrade hook after the Secrets it reads.
  const [job] = byKind(docs, "Job");
  assert.ok(job, "migration Job");
  assert.equal(job.metadata.annotations?.["helm.sh/hook"], "pre-install,pre-upgrade");
  const jobC = podSpecOf(job).containers[0]!;
  assert.deepEqual(jobC.command, ["space", "migrate"]);
  assert.equal(jobC.image, "registry.example.com/space:abc");
  const secrets = byKind(docs, "Secret");
  assert.deepEqual(secrets.map((s) => s.metadata.name).sort(), ["space", "space-node"]);
  for (const s of secrets) {
    assert.equal(s.metadata.annotations?.["helm.sh/hook"], "pre-install,pre-upgrade");
    assert.ok(Number(s.metadata.annotations?.["helm.sh/hook-weight"]) < Number(job.metadata.annotations?.["helm.sh/hook-weight"]));
  }
  const data = (name: string) => Object.fromEntries(Object.entries(secrets.find((s) => s.metadata.name === name)!.data!).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
  const cp = data("space");
  const node = data("space-node");
  assert.equal(cp.SPACE_DATABASE_URL, "postgres://space:pw@db:5432/space");
  assert.match(cp.SPACE_ENCRYPTION_KEY!, /^[0-9a-f]{64}$/);
  assert.ok(cp.SPACE_ADMIN_TOKEN!.length >= 32 && cp.SPACE_INTERNAL_TOKEN!.length >= 32);
  // A node gets the internal token, the blob store and the key; never the database or the admin token.
  assert.deepEqual(Object.keys(node).sort(), ["SPACE_BLOB_URL", "SPACE_ENCRYPTION_KEY", "SPACE_INTERNAL_TOKEN", "SPACE_S3_ACCESS_KEY_ID", "SPACE_S3_SECRET_ACCESS_KEY"]);
  assert.equal(node.SPACE_INTERNAL_TOKEN, cp.SPACE_INTERNAL_TOKEN);
  assert.equal(node.SPACE_ENCRYPTION_KEY, cp.SPACE_ENCRYPTION_KEY);

  const workloads = [...byKind(docs, "Deployment"), ...byKind(docs, "DaemonSet"), job];
  assert.deepEqual(workloads.map((w) => podSpecOf(w).containers[0]!.command!.join(" ")).sort(), ["space api", "space controller", "space migrate", "space node"]);
  for (const w of workloads) {
    const c = podSpecOf(w).containers[0]!;
    const env: Record<string, string> = {};
    for (const e of c.env ?? []) env[e.name] = e.value ?? (e.name === "HOST_IP" ? "10.0.0.7" : "from-field");
    for (const [k, v] of Object.entries(env)) env[k] = v.replace(/\$\(([A-Z_]+)\)/g, (_, n: string) => env[n] ?? "");
    // The Secret's keys (the values rendered above) complete the settings.
    const secret = c.envFrom?.[0]?.secretRef?.name;
    assert.ok(secret === "space" || secret === "space-node", `${w.metadata.name} reads ${secret}`);
    assert.doesNotThrow(() => loadConfig({ ...env, ...(secret === "space" ? cp : node) }), w.metadata.name);
    assert.ok(c.name && (w.kind !== "DaemonSet" || secret === "space-node"));
  }
  const ds = byKind(docs, "DaemonSet")[0]!;
  assert.deepEqual((podSpecOf(ds) as unknown as { tolerations: unknown[] }).tolerations, [{ key: "space.dev/host", operator: "Exists" }]);

  const [ing] = byKind(docs, "Ingress");
  const ingSpec = ing!.spec as { ingressClassName: string; tls: Array<{ secretName: string; hosts: string[] }>; rules: Array<{ host: string; http: { paths: Array<{ backend: { service: { port: { name: string } } } }> } }> };
  assert.equal(ingSpec.ingressClassName, "nginx");
  assert.deepEqual(ingSpec.tls, [{ secretName: "space-tls", hosts: ["api.example.com", "*.sbx.example.com"] }]);
  assert.deepEqual(ingSpec.rules.map((r) => [r.host, r.http.paths[0]!.backend.service.port.name]), [["api.example.com", "api"], ["*.sbx.example.com", "gateway"]]);
  assert.deepEqual(byKind(docs, "PodDisruptionBudget").map((p) => p.metadata.name).sort(), ["space-api", "space-controller"]);
  assert.equal(byKind(docs, "ServiceMonitor").length, 1);
  // Without the value, a ServiceMonitor appears only where the cluster serves its CRD.
  assert.equal(byKind(render(...required), "ServiceMonitor").length, 0);
  assert.equal(byKind(render(...required, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"), "ServiceMonitor").length, 1);
});

test("helm install, upgrade and uninstall through the apiserver; the full render's objects, hooks included, are created", { skip }, async () => {
  const objects = KubernetesObjectApi.makeApiClient(kubeConfigOf({ kind: "kubeconfig", path: cluster.kubeconfigPath }));
  // The harness made the RuntimeClass (and the sandbox namespace) as deploy/ would; the release owns its own.
  await cluster.kube.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/space");
  await cluster.kube.request("POST", "/api/v1/namespaces", { body: { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } } });
  // Hooks need a Job controller to finish; install without them, with Secrets made beforehand.
  for (const name of ["space", "space-node"])
    await cluster.kube.request("POST", `/api/v1/namespaces/${NS}/secrets`, { body: { apiVersion: "v1", kind: "Secret", metadata: { name }, stringData: { SPACE_INTERNAL_TOKEN: "t".repeat(32) } } });
  const base = ["--namespace", NS, "--set", "sandboxNamespace.create=false", "--set", "secrets.create=false", "--no-hooks"];
  helm("install", "space", CHART, ...base);
  const api = () => cluster.kube.request<{ spec: { replicas: number; template: { spec: { containers: Container[] } } } }>("GET", `/apis/apps/v1/namespaces/${NS}/deployments/space-api`);
  assert.equal((await api()).spec.replicas, 2);
  await cluster.kube.request("GET", `/apis/apps/v1/namespaces/${NS}/daemonsets/space-node`);
  await cluster.kube.request("GET", `/apis/policy/v1/namespaces/${NS}/poddisruptionbudgets/space-api`);
  await cluster.kube.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/space-node");
  helm("upgrade", "space", CHART, ...base, "--set", "api.replicas=3", "--set", "image.tag=next");
  const upgraded = await api();
  assert.equal(upgraded.spec.replicas, 3);
  assert.equal(upgraded.spec.template.spec.containers[0]!.image, "space:next");
  assert.match(helm("history", "space", "--namespace", NS), /upgrade complete/i);
  helm("uninstall", "space", "--namespace", NS);
  await waitFor(
    () => cluster.kube.request("GET", `/apis/apps/v1/namespaces/${NS}/deployments/space-api`).then(() => undefined, (e: unknown) => (isNotFound(e) ? true : undefined)),
    "space-api gone after uninstall",
    30_000,
    200,
  );

  // Every option on, applied object by object (the ServiceMonitor's CRD first, as prometheus-operator installs it).
  await cluster.kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
    body: {
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: "servicemonitors.monitoring.coreos.com" },
      spec: {
        group: "monitoring.coreos.com",
        scope: "Namespaced",
        names: { plural: "servicemonitors", singular: "servicemonitor", kind: "ServiceMonitor" },
        versions: [{ name: "v1", served: true, storage: true, schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } } }],
      },
    },
  });
  await waitFor(
    () => cluster.kube.request("GET", "/apis/monitoring.coreos.com/v1").then(() => true, () => undefined),
    "the ServiceMonitor CRD served",
    30_000,
    200,
  );
  for (const name of ["space", "space-node"]) await cluster.kube.request("DELETE", `/api/v1/namespaces/${NS}/secrets/${name}`);
  const docs = render(...required, "--set", "sandboxNamespace.create=false", "--set", "sandboxDomain=sbx.example.com", "--set", "ingress.enabled=true", "--set", "ingress.tls.enabled=true", "--set", "ingress.tls.secretName=space-tls", "--set", "serviceMonitor.enabled=true");
  const order = ["RuntimeClass", "ServiceAccount", "Secret", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Job", "Service", "Deployment", "DaemonSet", "PodDisruptionBudget", "Ingress", "ServiceMonitor"];
  for (const d of docs) assert.ok(order.includes(d.kind), `unexpected kind ${d.kind}`);
  docs.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind));
  for (const d of docs) {
    await objects.create(d).catch((e: { code?: number; body?: unknown }) => {
      throw new Error(`${d.kind} ${d.metadata.name}: ${String(e.code)} ${JSON.stringify(e.body ?? e)}`);
    });
  }
  for (const d of docs) {
    const got = await objects.read({ apiVersion: d.apiVersion, kind: d.kind, metadata: { name: d.metadata.name, ...(d.metadata.namespace ? { namespace: d.metadata.namespace } : {}) } });
    assert.equal(got.metadata?.name, d.metadata.name, `${d.kind} ${d.metadata.name}`);
  }
  assert.deepEqual(new Set(docs.map((d) => d.kind)), new Set(order));
});
