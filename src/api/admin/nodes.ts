/**
 * Admin API for the Direct fleet (`/admin/api/v1/nodes`):
 *
 *   POST   /nodes                 register (node credential); `verify: true` calls the node back
 *   POST   /nodes/:id/heartbeat   publish capacity, environments, templates (node credential)
 *   GET    /nodes/:id/sandboxes   ids the control plane wants on the node (node credential)
 *   POST   /nodes/:id/reconciled  {sandbox_ids}: what the node kept at its start; the records
 *                                 placed there that it did not keep become `failed` (node credential)
 *   POST   /nodes/:id/sandboxes/:sandboxId/unhealthy  {reason}: the node's watchdog found it
 *                                 unhealthy; a running record becomes `failed`; 200: the node may
 *                                 kill it, 404: unknown sandbox, the node keeps it (node credential)
 *   GET    /nodes, /nodes/:id     list / show (admin)
 *   POST   /nodes/:id/drain       {mode: gentle|forced} (admin); forced answers when the
 *                                 evacuation is over: 200 with `evacuation: {moved, stayed,
 *                                 sandboxes: [{sandbox_id, outcome, to_node_id?, reason?}]}`
 *   POST   /nodes/:id/fence       refuse the node's writes, place nothing there (admin)
 *   POST   /nodes/:id/ready       clear a drain or fence (admin)
 *   DELETE /nodes/:id             forget a node without resident sandboxes (admin)
 *
 * Credentials. A node authenticates with the internal token (SPACE_INTERNAL_TOKEN) —
 * the secret it already shares with the control plane, which calls node-api with it —
 * so nodes never hold the admin token (which can create tenants and keys). An admin
 * credential may register nodes too (operators, scripts). Any other credential is 403.
 *
 * Registration refusals say why and store nothing: 403 wrong credential, fenced node, or
 * labels outside the label fence (SPACE_NODE_LABEL_PREFIXES, node credential only);
 * 409 the id belongs to another node name (two hosts share a node-id file) or the name to
 * another ready node; 422 the call-back failed (unreachable, or the node at that address
 * answered with another id). A registration whose address differs from the stored one
 * is always verified, then the address is updated (the reference kept stale addresses).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { SpaceError, notFound } from "../../core/errors.ts";
import type { NodeId } from "../../core/ids.ts";
import type { Logger } from "../../core/log.ts";
import type { Db } from "../../store/db.ts";
import {
  findFleetNode,
  getFleetNode,
  listFleetNodes,
  recordHeartbeat,
  registrationConflict,
  setFleetNodeStatus,
  upsertRegistration,
  type FleetNode,
  type FleetRegistration,
} from "../../store/node-fleet.ts";
import { deleteNode } from "../../store/nodes.ts";
import { listSandboxesOnNode } from "../../store/sandboxes.ts";
import { failMissingOnNode, failUnhealthy, type ReportTarget } from "../../sandboxes/node-reports.ts";
import { NodeClient } from "../../substrate/node-client.ts";
import { DEFAULT_CAPACITY, memoryStanding, type CapacitySettings } from "../../substrate/capacity.ts";
import { authenticateBearer, bearerOf, requireScope } from "../auth.ts";
import type { Evacuation } from "./evacuate.ts";
import { parseInput as parse, toErrorBody } from "../error-body.ts";
import { DrainBody, HeartbeatBody, NodeParams as IdParams, ReasonBody, ReconciledBody, RegisterNodeBody as RegisterBody, UnhealthyBody, UnhealthyParams } from "./admin-schemas.ts";

export interface NodeAdminDeps {
  db: Db;
  adminToken: string;
  internalToken: string;
  log: Logger;
  /** Call-back used by verify (default: node-api GET /health with the internal token). */
  verifyNode?: (address: string, signal: AbortSignal) => Promise<{ nodeId: string }>;
  /**
   * Forced drain: suspend every running/paused resident to the blob store and restore it
   * on another node (src/api/admin/evacuate.ts). Absent (e.g. a test without a sandbox
   * service): forced drain answers 501 naming what is missing.
   */
  evacuate?: (nodeId: string, signal: AbortSignal) => Promise<Evacuation>;
  /** The service whose rows `reconciled` and `unhealthy` move (so in-process waits see it); absent: 501. */
  sandboxes?: ReportTarget;
  /**
   * Label fence (SPACE_NODE_LABEL_PREFIXES): the label-key prefixes a node may publish
   * about itself. A registration by the node credential carrying any other label is
   * refused (403, `refused_labels` in the body) and nothing is stored; node-ctl then
   * registers without them. Admin credentials may set any label. Empty = no fence.
   */
  labelPrefixes?: readonly string[];
  /** The capacity model's settings: a heartbeat records whether the node is past its memory target (default DEFAULT_CAPACITY). */
  capacity?: Readonly<CapacitySettings>;
}

const base = "/admin/api/v1/nodes";

export function registerNodeAdminRoutes(app: FastifyInstance, deps: NodeAdminDeps): void {
  const admin = async (req: FastifyRequest) => {
    const bearer = bearerOf(req);
    if (bearer && deps.internalToken && sameSecret(bearer, deps.internalToken)) {
      throw new SpaceError(
        "permission_denied",
        "the node credential may register and heartbeat only; this route needs an admin credential",
      );
    }
    const p = await authenticateBearer(deps.db, bearer, deps.adminToken);
    requireScope(p, "admin");
  };
  /** The node credential (internal token) or an admin one; which one it was. */
  const nodeWriter = async (req: FastifyRequest): Promise<"node" | "admin"> => {
    const bearer = bearerOf(req);
    if (!bearer)
      throw new SpaceError("unauthenticated", "missing credentials: send Authorization: Bearer <SPACE_INTERNAL_TOKEN>");
    if (deps.internalToken && sameSecret(bearer, deps.internalToken)) return "node";
    const p = await authenticateBearer(deps.db, bearer, deps.adminToken).catch(() => null);
    if (!p || !p.scopes.includes("admin")) {
      throw new SpaceError(
        "permission_denied",
        "wrong credential: nodes register with the internal token (SPACE_INTERNAL_TOKEN) or an admin credential",
      );
    }
    return "admin";
  };
  const fence = deps.labelPrefixes?.filter(Boolean) ?? [];
  const verify =
    deps.verifyNode ??
    ((address: string, signal: AbortSignal) =>
      new NodeClient({ baseUrl: address, internalToken: deps.internalToken, timeoutMs: 5_000 }).health(signal));

  app.post(base, async (req, reply) => {
    const who = await nodeWriter(req);
    const b = parse(RegisterBody, req.body, "body");
    const outside = who === "node" && fence.length ? Object.keys(b.labels).filter((k) => !fence.some((p) => k.startsWith(p))) : [];
    if (outside.length) {
      const message =
        `node ${b.name} may not publish labels outside the allowed prefixes (${fence.join(", ")}): ${outside.sort().join(", ")}; ` +
        `register without them, or have an operator set them`;
      req.log.info({ node: b.id, refusedLabels: outside }, "node registration refused: labels outside the fence");
      return reply.status(403).send({ code: 403, message, reason: "permission_denied", refused_labels: outside.sort(), allowed_prefixes: fence });
    }
    const reg: FleetRegistration = {
      id: b.id as NodeId,
      name: b.name,
      address: b.address.replace(/\/+$/, ""),
      nodeGroup: b.node_group,
      labels: b.labels,
      ...(b.capacity ? { capacity: b.capacity } : {}),
      ...(b.used ? { used: b.used } : {}),
      ...(b.usable_environments ? { usableEnvironments: b.usable_environments } : {}),
      ...(b.templates ? { templates: b.templates } : {}),
      ...(b.version !== undefined ? { version: b.version } : {}),
    };
    const before = await findFleetNode(deps.db, reg.id);
    const conflict = await registrationConflict(deps.db, reg, before);
    if (conflict) throw conflict;
    const addressChanged = before !== undefined && before.address !== reg.address;
    const mustVerify = b.verify || addressChanged;
    if (mustVerify) {
      const failure = await callBack(verify, reg);
      if (failure) {
        req.log.info({ node: reg.id, address: reg.address, failure }, "node registration refused: verify failed");
        return reply.status(422).send({ code: 422, message: failure, reason: "failed_precondition" });
      }
    }
    // Stored only now, re-checked under the row lock: a refusal leaves nothing behind.
    const node = await deps.db.transaction(async (tx) => {
      const locked = await findFleetNode(tx, reg.id, { forUpdate: true });
      const again = await registrationConflict(tx, reg, locked);
      if (again) throw again;
      return upsertRegistration(tx, reg, mustVerify);
    });
    if (addressChanged) deps.log.info({ node: reg.id, from: before.address, to: reg.address }, "node address changed (verified)");
    else if (!before)
      deps.log.info(
        { node: reg.id, name: reg.name, address: reg.address, group: reg.nodeGroup, verified: mustVerify },
        "node registered",
      );
    return reply.status(before ? 200 : 201).send(present(node));
  });

  app.post(`${base}/:id/heartbeat`, async (req) => {
    await nodeWriter(req);
    const { id } = parse(IdParams, req.params, "path");
    const b = parse(HeartbeatBody, req.body, "body");
    const n = await recordHeartbeat(deps.db, id, {
      memoryStanding: b.capacity && b.used ? memoryStanding({ capacity: b.capacity, used: b.used }, deps.capacity ?? DEFAULT_CAPACITY) : undefined,
      address: b.address.replace(/\/+$/, ""),
      ...(b.capacity ? { capacity: b.capacity } : {}),
      ...(b.used ? { used: b.used } : {}),
      ...(b.usable_environments ? { usableEnvironments: b.usable_environments } : {}),
      ...(b.templates ? { templates: b.templates } : {}),
    });
    return { status: n.status, drain_mode: n.drainMode };
  });

  app.post(`${base}/:id/reconciled`, async (req) => {
    await nodeWriter(req);
    const { id } = parse(IdParams, req.params, "path");
    const b = parse(ReconciledBody, req.body, "body");
    if (!deps.sandboxes) throw new SpaceError("unimplemented", "reconciled needs the sandbox service, which this API process was started without");
    const n = await getFleetNode(deps.db, id);
    return { failed: await failMissingOnNode(deps.db, deps.sandboxes, n.id, new Set(b.sandbox_ids), deps.log) };
  });

  app.post(`${base}/:id/sandboxes/:sandboxId/unhealthy`, async (req) => {
    await nodeWriter(req);
    const { id, sandboxId } = parse(UnhealthyParams, req.params, "path");
    const b = parse(UnhealthyBody, req.body, "body");
    if (!deps.sandboxes) throw new SpaceError("unimplemented", "unhealthy needs the sandbox service, which this API process was started without");
    const n = await getFleetNode(deps.db, id);
    if (!(await failUnhealthy(deps.sandboxes, n.id, sandboxId, b.reason, deps.log))) throw notFound(`sandbox ${sandboxId} not found`);
    return { kill: true };
  });

  app.get(`${base}/:id/sandboxes`, async (req) => {
    await nodeWriter(req);
    const { id } = parse(IdParams, req.params, "path");
    const n = await getFleetNode(deps.db, id);
    const rows = await listSandboxesOnNode(deps.db, n.id);
    return { sandbox_ids: rows.map((r) => r.id) };
  });

  app.get(base, async (req) => {
    await admin(req);
    return { nodes: (await listFleetNodes(deps.db)).map((n) => ({ ...present(n), resident_sandboxes: n.residentSandboxes })) };
  });

  app.get(`${base}/:id`, async (req) => {
    await admin(req);
    const { id } = parse(IdParams, req.params, "path");
    const n = await getFleetNode(deps.db, id);
    const rows = await listSandboxesOnNode(deps.db, n.id);
    return { ...present(n), resident_sandboxes: rows.length, sandboxes: rows.map((r) => ({ id: r.id, state: r.state })) };
  });

  app.post(`${base}/:id/drain`, async (req, reply: FastifyReply) => {
    await admin(req);
    const { id } = parse(IdParams, req.params, "path");
    const { mode } = parse(DrainBody, req.body, "body");
    if (mode === "forced" && !deps.evacuate) {
      await getFleetNode(deps.db, id);
      const e = new SpaceError(
        "unimplemented",
        "forced drain needs suspend/restore (memory checkpoint, publish to the blob store, restore on another node), which this build does not provide yet; " +
          "use mode=gentle (no new placements, residents stay)",
      );
      return reply.status(501).send(toErrorBody(e));
    }
    const n = await setFleetNodeStatus(deps.db, id, "draining", { drainMode: mode, reason: `${mode} drain requested` });
    deps.log.info({ node: n.id, name: n.name, mode }, "node drain requested");
    if (mode === "forced" && deps.evacuate) {
      // Synchronous: the answer is the per-sandbox report. The node stays draining (forced)
      // until POST /ready, whatever moved; a repeated forced drain retries what stayed.
      const ev = await deps.evacuate(n.id, AbortSignal.timeout(30 * 60_000));
      return reply.status(200).send({
        ...present(n),
        evacuation: {
          moved: ev.moved,
          stayed: ev.stayed,
          sandboxes: ev.sandboxes.map((o) => ({
            sandbox_id: o.sandboxId,
            outcome: o.outcome,
            ...(o.toNodeId ? { to_node_id: o.toNodeId } : {}),
            ...(o.snapshotId ? { snapshot_id: o.snapshotId } : {}),
            ...(o.reason ? { reason: o.reason } : {}),
            duration_ms: o.durationMs,
          })),
          volumes: { moved: ev.volumes.moved, stayed: ev.volumes.stayed },
        },
      });
    }
    return present(n);
  });

  app.post(`${base}/:id/fence`, async (req) => {
    await admin(req);
    const { id } = parse(IdParams, req.params, "path");
    const { reason } = parse(ReasonBody, req.body, "body");
    const n = await setFleetNodeStatus(deps.db, id, "fenced", { reason: reason ?? "fenced by an operator" });
    deps.log.warn({ node: n.id, name: n.name, reason }, "node fenced");
    return present(n);
  });

  app.post(`${base}/:id/ready`, async (req) => {
    await admin(req);
    const { id } = parse(IdParams, req.params, "path");
    const n = await setFleetNodeStatus(deps.db, id, "ready");
    deps.log.info({ node: n.id, name: n.name }, "node readied (drain/fence cleared)");
    return present(n);
  });

  app.delete(`${base}/:id`, async (req, reply) => {
    await admin(req);
    const { id } = parse(IdParams, req.params, "path");
    const n = await findFleetNode(deps.db, id);
    if (!n) return reply.status(204).send();
    const rows = await listSandboxesOnNode(deps.db, n.id);
    if (rows.length) {
      throw new SpaceError(
        "failed_precondition",
        `node ${id} still holds ${rows.length} sandboxes (${rows
          .slice(0, 5)
          .map((r) => r.id)
          .join(", ")}…); kill or drain them first`,
      );
    }
    await deleteNode(deps.db, n.id);
    return reply.status(204).send();
  });
}

/** null when the node at the address answered with the registering id; else why not. */
async function callBack(verify: NonNullable<NodeAdminDeps["verifyNode"]>, reg: FleetRegistration): Promise<string | null> {
  try {
    const h = await verify(reg.address, AbortSignal.timeout(10_000));
    if (h.nodeId !== reg.id) {
      return `verify failed: the node at ${reg.address} answered with id ${h.nodeId || "(none)"}, not ${reg.id}`;
    }
    return null;
  } catch (e) {
    const err = SpaceError.from(e);
    return `verify failed: could not call the node back at ${reg.address}/health: ${err.message}`;
  }
}

/** The node as the admin API shows it (snake_case, like the rest of /admin). */
export function present(n: FleetNode) {
  return {
    id: n.id,
    name: n.name,
    address: n.address,
    node_group: n.nodeGroup,
    labels: n.labels,
    status: n.status,
    drain_mode: n.drainMode,
    status_reason: n.statusReason,
    status_changed_at: iso(n.statusChangedAt),
    capacity: n.capacity,
    used: n.used,
    memory_full_slots: n.memoryFullSlots,
    usable_environments: n.usableEnvironments,
    templates: n.templates,
    version: n.version,
    verified_at: n.verifiedAt ? iso(n.verifiedAt) : null,
    last_heartbeat_at: iso(n.lastHeartbeatAt),
    registered_at: iso(n.registeredAt),
  };
}

const iso = (d: Date | string) => new Date(d).toISOString();

function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest());
}
