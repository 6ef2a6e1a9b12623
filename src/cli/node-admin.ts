/**
 * `space node list|show|drain|fence|ready|delete`: an operator's view of the Direct fleet,
 * over the Admin API (`/admin/api/v1/nodes`, src/api/admin/nodes.ts) with the admin token
 * (the client connection of every command: client/connection.ts).
 * A node is named by its id or its name.
 */
import { SpaceError } from "../core/errors.ts";
import type { ApiClient } from "./client/api-client.ts";

interface NodeView {
  id: string;
  name: string;
  address: string;
  node_group: string;
  status: string;
  drain_mode: string | null;
  status_reason: string | null;
  resident_sandboxes?: number;
  last_heartbeat_at: string;
  labels: Record<string, string>;
  usable_environments: string[];
}

interface Evacuated {
  sandbox_id: string;
  outcome: string;
  to_node_id?: string;
  reason?: string;
  duration_ms: number;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

async function call<T>(t: ApiClient, method: string, path: string, body?: unknown): Promise<T> {
  return t.admin<T>(method, path, body);
}

/** The node's id: `ref` itself when it is a UUID, else the node of that name. */
async function resolveNode(t: ApiClient, ref: string): Promise<string> {
  if (UUID.test(ref)) return ref;
  const { nodes } = await call<{ nodes: NodeView[] }>(t, "GET", "/nodes");
  const hit = nodes.filter((n) => n.name === ref);
  if (hit.length === 1) return hit[0]!.id;
  if (hit.length > 1) throw new SpaceError("invalid_argument", `${hit.length} nodes are named ${ref}: use the id (${hit.map((n) => n.id).join(", ")})`);
  throw new SpaceError("not_found", `no node has the id or name ${ref} (space node list shows them)`);
}

function line(n: NodeView): string {
  const status = n.drain_mode ? `${n.status} (${n.drain_mode})` : n.status;
  return [n.name, n.id, status, n.node_group, n.address, String(n.resident_sandboxes ?? "-"), n.last_heartbeat_at].join("\t");
}

export type NodeAdminAction =
  | { kind: "list" }
  | { kind: "show"; node: string }
  | { kind: "drain"; node: string; forced: boolean }
  | { kind: "fence"; node: string; reason?: string }
  | { kind: "ready"; node: string }
  | { kind: "delete"; node: string };

/** Runs one action; returns what to print (the JSON answer with `json`, else a summary). */
export async function runNodeAdmin(t: ApiClient, a: NodeAdminAction, json: boolean): Promise<string> {
  if (a.kind === "list") {
    const r = await call<{ nodes: NodeView[] }>(t, "GET", "/nodes");
    if (json) return JSON.stringify(r);
    return ["NAME\tID\tSTATUS\tGROUP\tADDRESS\tSANDBOXES\tLAST HEARTBEAT", ...r.nodes.map(line)].join("\n");
  }
  const id = await resolveNode(t, a.node);
  switch (a.kind) {
    case "show": {
      const n = await call<NodeView>(t, "GET", `/nodes/${id}`);
      return JSON.stringify(n, null, json ? undefined : 2);
    }
    case "drain": {
      const r = await call<NodeView & { evacuation?: { moved: number; stayed: number; sandboxes: Evacuated[] } }>(t, "POST", `/nodes/${id}/drain`, {
        mode: a.forced ? "forced" : "gentle",
      });
      if (json) return JSON.stringify(r);
      const head = `node ${r.name} (${r.id}) is ${r.status} (${r.drain_mode ?? "gentle"}): no new sandboxes are placed there`;
      if (!r.evacuation) return `${head}; its sandboxes stay`;
      const rows = r.evacuation.sandboxes.map(
        (s) => `  ${s.sandbox_id}\t${s.outcome}${s.to_node_id ? ` → ${s.to_node_id}` : ""}${s.reason ? `\t${s.reason}` : ""}\t${s.duration_ms} ms`,
      );
      return [`${head}; evacuation: ${r.evacuation.moved} moved, ${r.evacuation.stayed} stayed`, ...rows].join("\n");
    }
    case "fence": {
      const r = await call<NodeView>(t, "POST", `/nodes/${id}/fence`, a.reason ? { reason: a.reason } : {});
      return json ? JSON.stringify(r) : `node ${r.name} (${r.id}) is fenced: its writes are refused and nothing is placed there`;
    }
    case "ready": {
      const r = await call<NodeView>(t, "POST", `/nodes/${id}/ready`, {});
      return json ? JSON.stringify(r) : `node ${r.name} (${r.id}) is ${r.status}: placements resume`;
    }
    case "delete": {
      await call(t, "DELETE", `/nodes/${id}`);
      return json ? JSON.stringify({ deleted: id }) : `node ${id} deleted`;
    }
  }
}
