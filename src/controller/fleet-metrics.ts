/**
 * Cluster-wide gauges read from the store at scrape time (no loop, no counting on the
 * create path): sandboxes by state and template, the operation queue (depth and oldest
 * age), nodes by status. Every controller replica registers them, leader or not, and
 * each reports the same store: aggregate replicas with max(), not sum().
 */
import type { Registry } from "prom-client";
import { perScrape, scrapedGauge } from "../core/metrics.ts";
import type { Db } from "../store/db.ts";
import { countNodesByStatus, countSandboxesByState, operationQueue } from "../store/metric-queries.ts";
import { volumeTotals } from "../store/volumes.ts";

export function registerFleetMetrics(registry: Registry, db: Db): void {
  scrapedGauge(registry, "space_sandboxes", "Live sandboxes by state and template (from the store)", ["state", "template"], async () =>
    (await countSandboxesByState(db)).map((r) => ({ labels: { state: r.state, template: r.template }, value: r.count })),
  );
  // One query serves both queue families within a scrape.
  const rows = perScrape(() => operationQueue(db));
  scrapedGauge(registry, "space_operation_queue_depth", "Operations queued or claimed, by kind and state", ["kind", "state"], async () =>
    (await rows()).map((r) => ({ labels: { kind: r.kind, state: r.state }, value: r.count })),
  );
  scrapedGauge(registry, "space_operation_queue_oldest_age_seconds", "Age of the oldest queued or claimed operation, by kind and state", ["kind", "state"], async () =>
    (await rows()).map((r) => ({ labels: { kind: r.kind, state: r.state }, value: r.oldestAgeSeconds })),
  );
  scrapedGauge(registry, "space_nodes", "Registered nodes by status (from the store)", ["status"], async () =>
    (await countNodesByStatus(db)).map((r) => ({ labels: { status: r.status }, value: r.count })),
  );
  const volumes = perScrape(() => volumeTotals(db));
  scrapedGauge(registry, "space_volumes", "Volumes kept, and those a live sandbox mounts (from the store)", ["state"], async () => {
    const v = await volumes();
    return [
      { labels: { state: "all" }, value: v.volumes },
      { labels: { state: "mounted" }, value: v.mounted },
    ];
  });
  scrapedGauge(registry, "space_volume_size_mib", "Summed size (quota) of all volumes, MiB (from the store)", [], async () => [{ labels: {}, value: (await volumes()).sizeMib }]);
}
