/**
 * Create latency on the Kubernetes substrate next to Direct, in one run: the same
 * processes (`space api` + `space controller` on Postgres, one real runc `space node`)
 * as a Direct fleet, then with SPACE_SUBSTRATE=kubernetes against a real kube-apiserver
 * + kube-scheduler (test/kubernetes/fleet.ts). N sequential e2b SDK `Sandbox.create()`
 * each (after one untimed warm-up create); sandboxes are killed between samples (not timed).
 *
 * On Kubernetes a watch on the sandbox namespace splits each create into
 * API → pod created → pod bound (kube-scheduler) → pod Ready (node agent) → API answered.
 *
 *   npm run bench -- kubernetes [--n 20] [--json]
 */
import { parseArgs } from "node:util";
import { Sandbox } from "e2b";
import { podNameOf } from "../src/kube/names.ts";
import type { PodObject } from "../src/kube/objects.ts";
import { k8sSkipReason } from "../test/kubernetes/cluster.ts";
import { startKubeFleet, type KubeFleet } from "../test/kubernetes/fleet.ts";
import { percentile } from "./support/stats.ts";

const stats = (xs: number[]) => {
  return { medianMs: Math.round(percentile(xs, 50)), p99Ms: Math.round(percentile(xs, 99)) };
};

interface PodTimes {
  added?: number;
  bound?: number;
  ready?: number;
}

async function creates(f: KubeFleet, n: number, onSample?: (id: string, t0: number, t1: number) => void): Promise<number[]> {
  const opts = { apiKey: f.apiKey, apiUrl: f.apiUrl, sandboxUrl: f.gatewayUrl, requestTimeoutMs: 120_000 };
  const warm = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
  await warm.kill();
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const sb = await Sandbox.create({ ...opts, timeoutMs: 120_000 });
    const t1 = performance.now();
    out.push(t1 - t0);
    onSample?.(sb.sandboxId, t0, t1);
    await sb.kill();
  }
  return out;
}

async function main() {
  const { values } = parseArgs({ options: { n: { type: "string", default: "20" }, json: { type: "boolean", default: false } } });
  const n = Number(values.n);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--n must be a positive integer, not ${values.n}`);
  if (k8sSkipReason) throw new Error(k8sSkipReason);
  if (!process.env.SPACE_TEST_DATABASE_URL) throw new Error("SPACE_TEST_DATABASE_URL must name a Postgres (bash scripts/ci-postgres.sh)");
  const env = { SPACE_DEFAULT_VCPU: "1", SPACE_DEFAULT_MEMORY_MIB: "256" };

  const direct = await startKubeFleet({ nodes: 1, substrate: "direct", env });
  let directMs: number[];
  try {
    directMs = await creates(direct, n);
  } finally {
    await direct.stop();
  }

  const kube = await startKubeFleet({ nodes: 1, env });
  const times = new Map<string, PodTimes>();
  const stop = new AbortController();
  const parts = { toPodCreated: [] as number[], toBound: [] as number[], toReady: [] as number[], toAnswered: [] as number[] };
  let kubeMs: number[];
  try {
    const watching = kube.cluster!.kube
      .watch<PodObject>(
        `/api/v1/namespaces/${kube.namespace}/pods`,
        {},
        (e) => {
          const name = e.object.metadata?.name;
          if (!name || e.type === "DELETED") return;
          const t = times.get(name) ?? {};
          const now = performance.now();
          t.added ??= now;
          if (e.object.spec?.nodeName) t.bound ??= now;
          if (e.object.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) t.ready ??= now;
          times.set(name, t);
        },
        stop.signal,
      )
      .catch(() => {});
    kubeMs = await creates(kube, n, (id, t0, t1) => {
      const t = times.get(podNameOf(id));
      if (!t?.added || !t.bound || !t.ready) return;
      parts.toPodCreated.push(t.added - t0);
      parts.toBound.push(t.bound - t.added);
      parts.toReady.push(t.ready - t.bound);
      parts.toAnswered.push(t1 - t.ready);
    });
    stop.abort();
    await watching;
  } finally {
    stop.abort();
    await kube.stop();
  }

  const d = stats(directMs);
  const k = stats(kubeMs);
  const result = {
    n,
    direct: d,
    kubernetes: {
      ...k,
      breakdownMedianMs: {
        apiToPodCreated: stats(parts.toPodCreated).medianMs,
        podCreatedToBound: stats(parts.toBound).medianMs,
        boundToReady: stats(parts.toReady).medianMs,
        readyToAnswered: stats(parts.toAnswered).medianMs,
      },
      samplesWithBreakdown: parts.toBound.length,
    },
    kubernetesOverDirect: Math.round((k.medianMs / d.medianMs) * 100) / 100,
  };
  if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    process.stdout.write(`SDK create, ${n} sequential, 1 node agent (runc), same run:\n`);
    process.stdout.write(`  direct      median ${d.medianMs} ms  p99 ${d.p99Ms} ms\n`);
    process.stdout.write(`  kubernetes  median ${k.medianMs} ms  p99 ${k.p99Ms} ms  (${result.kubernetesOverDirect}x direct)\n`);
    const b = result.kubernetes.breakdownMedianMs;
    process.stdout.write(
      `  kubernetes breakdown (medians, ${parts.toBound.length} samples): API→pod created ${b.apiToPodCreated} ms, →bound ${b.podCreatedToBound} ms, →Ready ${b.boundToReady} ms, →API answered ${b.readyToAnswered} ms\n`,
    );
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  },
);
