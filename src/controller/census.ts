/**
 * Environment placement census (behaviours.md C). While the gate is `shadow` or `on`,
 * the leader reports once a minute:
 *   environment_placement_running_pods{placement=admitted|no_evidence|environment_not_usable}
 *     running sandboxes, by whether their node publishes their binding;
 *   environment_placement_pending_pods{reason=no_evidence|environment_not_usable}
 *     sandboxes still being placed whose binding no ready node publishes (or that have none).
 * Every placement under shadow/on is also counted as it happens
 * (environment_placement_decisions_total) and a shadow decision that `on` would have
 * refused is logged.
 */
import { Counter, Gauge, type Registry } from "prom-client";
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import { listNodes } from "../store/nodes.ts";
import { listPlacements } from "../store/sandboxes.ts";
import type { EnvironmentBinding, GateMode, GatePlacement } from "../substrate/placement.ts";
import type { GateObservation } from "../substrate/placement.ts";
import type { NodeDirectory } from "../substrate/node-directory.ts";

export interface CensusCounts {
  running: Record<GatePlacement, number>;
  pending: Record<"no_evidence" | "environment_not_usable", number>;
}

/** Pure: classify sandboxes against their nodes' published environments. */
export function computeCensus(
  sandboxes: ReadonlyArray<{ state: string; nodeId: string | null; binding: EnvironmentBinding }>,
  nodes: ReadonlyArray<{ id: string; status: string; usableEnvironments: readonly string[] }>,
): CensusCounts {
  const out: CensusCounts = {
    running: { admitted: 0, no_evidence: 0, environment_not_usable: 0 },
    pending: { no_evidence: 0, environment_not_usable: 0 },
  };
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const published = new Set(nodes.filter((n) => n.status === "ready").flatMap((n) => n.usableEnvironments));
  // No ready node publishes any environment (a fleet-wide label loss): no evidence either way.
  const noEvidence = published.size === 0;
  for (const s of sandboxes) {
    if (s.state === "running") {
      if (s.binding.kind !== "bound" || noEvidence) out.running.no_evidence++;
      else if (byId.get(s.nodeId ?? "")?.usableEnvironments.includes(s.binding.environment)) out.running.admitted++;
      else out.running.environment_not_usable++;
    } else if (s.state === "creating") {
      if (s.binding.kind !== "bound" || noEvidence) out.pending.no_evidence++;
      else if (!published.has(s.binding.environment)) out.pending.environment_not_usable++;
    }
  }
  return out;
}

export interface CensusMetrics {
  onGate(o: GateObservation): void;
  running: Gauge<"placement">;
  pending: Gauge<"reason">;
}

/** Registers the census metrics once per process; `onGate` feeds the direct substrate. */
export function createCensusMetrics(registry: Registry, log: Logger): CensusMetrics {
  const decisions = new Counter({
    name: "environment_placement_decisions_total",
    help: "placements under the environment gate (shadow|on), by how the chosen node relates to the binding",
    labelNames: ["gate", "placement", "shadow_would_fail"] as const,
    registers: [registry],
  });
  const running = new Gauge({
    name: "environment_placement_running_pods",
    help: "running sandboxes by environment placement (census, once a minute while the gate is shadow|on)",
    labelNames: ["placement"] as const,
    registers: [registry],
  });
  const pending = new Gauge({
    name: "environment_placement_pending_pods",
    help: "sandboxes waiting for placement whose environment no ready node publishes (census)",
    labelNames: ["reason"] as const,
    registers: [registry],
  });
  return {
    running,
    pending,
    onGate(o) {
      decisions.inc({ gate: o.gate, placement: o.placement, shadow_would_fail: o.wouldFail ? "true" : "false" });
      if (o.wouldFail)
        log.warn(
          { sandboxId: o.sandboxId, node: o.nodeId, reason: o.wouldFail },
          "environment gate (shadow): `on` would have refused this placement",
        );
      else if (o.placement === "environment_not_usable")
        log.info(
          { sandboxId: o.sandboxId, node: o.nodeId },
          "environment gate (shadow): placed on a node not publishing the environment",
        );
    },
  };
}

export interface CensusDeps {
  db: Db;
  log: Logger;
  gate: GateMode;
  metrics: CensusMetrics;
  binding: (templateId: string) => Promise<EnvironmentBinding>;
  intervalMs?: number;
  /** The substrate's nodes (Kubernetes: Node objects); default the store's registered nodes. */
  nodes?: NodeDirectory;
}

/**
 * One census now, from the store and the substrate's nodes: the leader's loop reports it
 * as gauges; the Admin API's GET /admin/api/v1/placement/census (the dashboard) reads it
 * on demand, whatever the gate, since it only reads.
 */
export async function readCensus(deps: Pick<CensusDeps, "db" | "binding" | "nodes">): Promise<CensusCounts> {
  const rows = await listPlacements(deps.db);
  const bindings = new Map<string, EnvironmentBinding>();
  for (const t of new Set(rows.map((r) => r.templateId ?? ""))) bindings.set(t, t ? await deps.binding(t) : { kind: "none" });
  const nodes = deps.nodes ? await deps.nodes.list(AbortSignal.timeout(10_000)) : await listNodes(deps.db);
  return computeCensus(
    rows.map((r) => ({ state: r.state, nodeId: r.nodeId, binding: bindings.get(r.templateId ?? "") ?? { kind: "none" } })),
    nodes,
  );
}

/** Leader loop; a no-op while the gate is off. */
export function startCensus(deps: CensusDeps): { stop(): Promise<void>; tick(): Promise<CensusCounts | null> } {
  let running: Promise<unknown> = Promise.resolve();
  const tick = async (): Promise<CensusCounts | null> => {
    if (deps.gate === "off") return null;
    try {
      const c = await readCensus(deps);
      for (const [k, v] of Object.entries(c.running)) deps.metrics.running.set({ placement: k }, v);
      for (const [k, v] of Object.entries(c.pending)) deps.metrics.pending.set({ reason: k }, v);
      return c;
    } catch (e) {
      deps.log.warn({ err: e }, "environment placement census failed");
      return null;
    }
  };
  const timer = setInterval(() => {
    running = running.then(tick);
  }, deps.intervalMs ?? 60_000);
  timer.unref();
  running = running.then(tick);
  return {
    tick,
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
