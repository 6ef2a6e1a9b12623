/**
 * How a node agent that runs inside the control-plane process (`space up`) publishes to
 * the store directly: the first publication registers the node, later ones heartbeat.
 * A standalone `space node` does the same over the Admin API (Direct fleet).
 */
import type { NodeId } from "../core/ids.ts";
import type { NodeInventory } from "../contract/node-api.ts";
import type { Db } from "../store/db.ts";
import { heartbeatNode, registerNode } from "../store/nodes.ts";
import { listSandboxesOnNode } from "../store/sandboxes.ts";
import { failMissingOnNode, failUnhealthy, type ReportTarget } from "../sandboxes/node-reports.ts";
import type { Logger } from "../core/log.ts";
import { VERSION } from "../core/version.ts";
import { memoryStanding, type CapacitySettings } from "../substrate/capacity.ts";
import { SpaceError } from "../core/errors.ts";
import type { LocalNode } from "../api/gateway/gateway.ts";
import type { NodeAgent } from "../node/agent.ts";

export function storePublisher(db: Db, address: () => string, nodeGroup: string, labels: Record<string, string>, capacity: Readonly<CapacitySettings>) {
  let registered = false;
  return async (inv: NodeInventory): Promise<void> => {
    const published = {
      capacity: inv.capacity,
      used: inv.used,
      usableEnvironments: inv.usableEnvironments,
      templates: inv.templates,
    };
    if (registered) {
      try {
        await heartbeatNode(db, inv.nodeId as NodeId, { ...published, address: address(), memoryStanding: memoryStanding(published, capacity) });
        return;
      } catch (e) {
        // Unknown to the store (e.g. deleted by an operator): register again below.
        if ((e as { code?: string }).code !== "not_found") throw e;
      }
    }
    await registerNode(db, {
      id: inv.nodeId as NodeId,
      name: inv.name,
      address: address(),
      nodeGroup,
      labels,
      substrate: "direct",
      version: VERSION,
      ...published,
    });
    registered = true;
  };
}

/** The sandboxes the control plane wants on a node (asked once when the agent starts). */
export function wantedOnNode(db: Db, nodeId: () => string | undefined) {
  return async (): Promise<Set<string> | undefined> => {
    const id = nodeId();
    if (!id) return undefined;
    const rows = await listSandboxesOnNode(db, id as NodeId);
    return new Set(rows.map((r) => r.id));
  };
}

/** After the agent's start reconcile: the records on the node it did not keep are failed. */
export function reconciledOnNode(db: Db, svc: ReportTarget, nodeId: () => string | undefined, log: Logger) {
  return async (kept: ReadonlySet<string>): Promise<void> => {
    const id = nodeId();
    if (id) await failMissingOnNode(db, svc, id, kept, log);
  };
}

/** The node's watchdog found a sandbox unhealthy: its record is failed (true: the node may kill it). */
export function unhealthyOnNode(svc: ReportTarget, nodeId: () => string | undefined, log: Logger) {
  return async (sandboxId: string, reason: string): Promise<boolean> => {
    const id = nodeId();
    return id ? failUnhealthy(svc, id, sandboxId, reason, log) : false;
  };
}

/** The gateway's way straight into this process's node: its sandboxes' addresses and deaths. */
export function localNodeRoute(agent: Pick<NodeAgent, "nodeId" | "manager">): LocalNode {
  const manager = () => {
    const m = agent.manager;
    if (!m) throw new SpaceError("not_found", "the node is not started");
    return m;
  };
  return {
    nodeId: () => agent.nodeId,
    target: (sandboxId, port) => manager().target(sandboxId, port),
    onDead(sandboxId, fn) {
      const events = manager().events;
      events.once(`dead:${sandboxId}`, fn);
      return () => events.off(`dead:${sandboxId}`, fn);
    },
  };
}
