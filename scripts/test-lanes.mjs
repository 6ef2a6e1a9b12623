// The test lanes: which files belong to which, shared by scripts/test.mjs and its reporter.
// A test counts in the "postgres" lane when it or a suite around it names Postgres
// (the engine suites are "… on postgres"); otherwise in its file's lane.
export const LANES = [
  { id: "unit", title: "unit (src/)" },
  { id: "store", title: "store, blob, operations and control plane (PGlite, fs, s3rver)" },
  { id: "postgres", title: "store and control plane on Postgres" },
  { id: "node", title: "envd, node agent, network, snapshots, templates (runc, btrfs, CRIU)" },
  { id: "e2e", title: "end-to-end (space up, e2b SDKs)" },
  { id: "fleet", title: "fleet lab (3 node agents on Postgres)" },
  { id: "kubernetes", title: "Kubernetes (kube-apiserver, kube-scheduler, node agents as kubelets)" },
  { id: "python", title: "e2b Python SDK" },
];

export function laneOf(file) {
  const f = file.replaceAll("\\", "/");
  if (f.includes("test/kubernetes/")) return "kubernetes";
  if (f.endsWith("test/e2e/fleet.test.ts")) return "fleet";
  if (f.endsWith("test/e2e/python-sdk.test.ts")) return "python";
  if (f.includes("test/e2e/")) return "e2e";
  if (/test\/(envd|node|network|snapshots|templates)\//.test(f)) return "node";
  if (f.startsWith("src/") || f.includes("/src/")) return "unit";
  return "store";
}
