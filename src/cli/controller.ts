/**
 * The controller: one leader at a time (lease row in the store, works on Postgres and
 * PGlite; on Kubernetes a coordination.k8s.io Lease) runs the cluster loops. Followers
 * wait and take over when the lease lapses.
 */
import type { ControlPlane } from "./processes.ts";
import { startLeaderElection, storeLeaseBackend, type LeaseBackend } from "../store/leader.ts";
import { hostname } from "node:os";
import { randomId } from "../core/ids.ts";
import { startNodeLiveness } from "../controller/node-liveness.ts";
import { startCensus } from "../controller/census.ts";
import { templateBinding } from "../sandboxes/queries.ts";
import { startDispatcher } from "../controller/dispatcher.ts";
import { startTimeoutEnforcer } from "../controller/timeouts.ts";
import { warmPoolLoop } from "../controller/warm-pools/index.ts";
import { startSnapshotRetention } from "../controller/snapshot-retention.ts";
import { startSnapshotPublication } from "../controller/snapshot-publication.ts";
import { registerFleetMetrics } from "../controller/fleet-metrics.ts";
import { spaceMetrics } from "../core/metrics.ts";

export interface Loop {
  stop(): Promise<void>;
}

/** Loops the leader runs; each returns a stopper. */
export type LoopFactory = (cp: ControlPlane) => Loop | Promise<Loop>;

/** The loops every controller leader runs. */
export const controllerLoops: readonly LoopFactory[] = [
  (cp) =>
    startNodeLiveness({
      db: cp.db,
      log: cp.log,
      graceMs: cp.config.SPACE_NODE_HEARTBEAT_GRACE_MS || 3 * cp.config.SPACE_NODE_HEARTBEAT_MS,
      repo: cp.layer.sandboxes.repo,
    }),
  (cp) =>
    startCensus({
      db: cp.db,
      log: cp.log,
      gate: cp.config.SPACE_ENVIRONMENT_PLACEMENT_GATE,
      metrics: cp.census,
      binding: (t) => templateBinding(cp.db, t),
      intervalMs: cp.config.SPACE_CENSUS_INTERVAL_MS,
      nodes: cp.layer.nodes,
    }),
  (cp) => startDispatcher({ db: cp.db, config: cp.config, log: cp.log, sandboxes: cp.layer.sandboxes, metrics: spaceMetrics(cp.metrics).operations }),
  (cp) => startTimeoutEnforcer({ sandboxes: cp.layer.sandboxes, log: cp.log }),
  (cp) => warmPoolLoop(cp),
  (cp) =>
    startSnapshotRetention({
      db: cp.db,
      blobs: cp.blobs,
      substrate: cp.layer.substrate,
      log: cp.log,
      minAgeMs: cp.config.SPACE_SNAPSHOT_RETENTION_MIN_AGE_S * 1000,
      intervalMs: cp.config.SPACE_SNAPSHOT_RETENTION_INTERVAL_S * 1000,
    }),
  (cp) =>
    startSnapshotPublication({
      db: cp.db,
      sandboxes: cp.layer.sandboxes,
      log: cp.log,
      minAgeMs: cp.config.SPACE_SNAPSHOT_PUBLISH_RETRY_S * 1000,
      intervalMs: cp.config.SPACE_SNAPSHOT_PUBLISH_RETRY_S * 1000,
    }),
];

/** Where the controller's lease lives: a coordination.k8s.io Lease on Kubernetes, else the store's lease row. */
async function leaseOf(cp: ControlPlane): Promise<{ backend: LeaseBackend; name: string }> {
  if (cp.config.SPACE_SUBSTRATE !== "kubernetes") return { backend: storeLeaseBackend(cp.db), name: "controller" };
  const { createKubeApi, kubeConnectionOf } = await import("../kube/kube-api.ts");
  const { kubeLeaseBackend } = await import("../substrate/kubernetes/lease.ts");
  return { backend: kubeLeaseBackend(createKubeApi(kubeConnectionOf(cp.config)), cp.config.SPACE_KUBE_NAMESPACE), name: "space-controller" };
}

export async function startController(cp: ControlPlane, loops: readonly LoopFactory[] = []): Promise<Loop> {
  registerFleetMetrics(cp.metrics, cp.db);
  let running: Loop[] = [];
  const holder = `${hostname()}:${process.pid}:${randomId(6)}`;
  const stopLoops = async () => {
    const current = running;
    running = [];
    await Promise.allSettled(current.map((l) => l.stop()));
  };
  const election = await startLeaderElection({
    ...(await leaseOf(cp)),
    holder,
    leaseMs: 5000,
    onElected: async () => {
      cp.log.info({ holder }, "controller elected leader");
      for (const make of loops) running.push(await make(cp));
    },
    onError: (e) => cp.log.warn({ err: e }, "leader election: lease renewal failed"),
    onDemoted: async () => {
      cp.log.warn({ holder }, "controller lost leadership");
      await stopLoops();
    },
  });
  return {
    async stop() {
      await stopLoops();
      await election.stop();
    },
  };
}
