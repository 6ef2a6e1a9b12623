/**
 * What the dashboard needs beyond the public APIs it otherwise calls (Native, ECW, Admin):
 * its static files (static.ts) and two live streams (live.ts), each behind the same
 * credential check as the API it summarises.
 *
 *   GET /dashboard/config.json      { sandbox_url }: where the gateway is (public, printed by `space up`)
 *   GET /v1/events/sandboxes        `sandboxes` events: { sandboxes: Sandbox[] } (the
 *                                   caller's live sandboxes, as GET /v1/sandboxes lists them)
 *   GET /admin/api/v1/events/fleet  `fleet` events: { nodes, pools } (as GET /admin/api/v1/nodes
 *                                   and /warm-pools answer them); admin credential
 *   GET /admin/api/v1/operations    every tenant's operations (and the cluster's), newest first,
 *                                   filtered and paged as GET /v1/operations, each with its
 *                                   tenant_id; admin credential
 *   GET /admin/api/v1/placement/census  { gate, running, pending, computed_at }: the environment
 *                                   placement census (src/controller/census.ts) computed now;
 *                                   admin credential
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { TenantId } from "../../core/ids.ts";
import type { Db } from "../../store/db.ts";
import { sandboxStates, type SandboxState } from "../../store/sandboxes.ts";
import { listFleetNodes } from "../../store/node-fleet.ts";
import { listWarmPools } from "../../store/warm-pools.ts";
import { endedStates } from "../../sandboxes/model.ts";
import type { SandboxService } from "../../sandboxes/service.ts";
import { toSandbox, type Sandbox } from "../../operations/results.ts";
import { authenticateBearer, bearerOf, requireScope, requireTenant, type Principal } from "../auth.ts";
import { present as presentNode } from "../admin/nodes.ts";
import { present as presentPool } from "../admin/warm-pools.ts";
import { parseInput } from "../error-body.ts";
import { ListOperationsQuery } from "../native/native-schemas.ts";
import { toOperation } from "../native/native-present.ts";
import { pageOfOperations } from "../native/operations.ts";
import type { GateMode } from "../../substrate/placement.ts";
import { streamLive } from "./live.ts";
import { registerDashboardStatic } from "./static.ts";

export interface DashboardDeps {
  db: Db;
  sandboxes: SandboxService;
  adminToken: string;
  /** The gateway's public URL (E2B_SANDBOX_URL): the page reaches envd there. */
  sandboxUrl: string;
  /** Where the built dashboard is (dist/dashboard); tests point elsewhere. */
  staticDir?: string;
  /** SPACE_ENVIRONMENT_PLACEMENT_GATE, reported beside the census. */
  gate: GateMode;
  /** The placement census now (controller/census.ts readCensus over the substrate's nodes, wired by the CLI). */
  census: () => Promise<{ running: Record<string, number>; pending: Record<string, number> }>;
}

const LIVE: readonly SandboxState[] = sandboxStates.filter((s) => !endedStates.includes(s));
/** A page lists at most this many; the stream says `truncated` beyond. */
const MAX_LISTED = 2000;
const PAGE = 500;

export function registerDashboardRoutes(app: FastifyInstance, deps: DashboardDeps): void {
  // Before the static wildcard; public, as `space up` prints it: the page needs it before sign-in.
  app.get("/dashboard/config.json", async () => ({ sandbox_url: deps.sandboxUrl }));
  registerDashboardStatic(app, deps.staticDir);
  const principal = (req: FastifyRequest): Promise<Principal> => authenticateBearer(deps.db, bearerOf(req), deps.adminToken);

  app.get("/v1/events/sandboxes", async (req, reply) => {
    const p = await principal(req);
    requireScope(p, "sandboxes:read");
    const tenantId = requireTenant(p);
    return streamLive(req, reply, "sandboxes", {
      read: () => liveSandboxes(deps.sandboxes, tenantId),
      subscribe: (wake) => {
        deps.sandboxes.events.on("started", wake);
        deps.sandboxes.events.on("ended", wake);
        return () => {
          deps.sandboxes.events.off("started", wake);
          deps.sandboxes.events.off("ended", wake);
        };
      },
    });
  });

  app.get("/admin/api/v1/events/fleet", async (req, reply) => {
    requireScope(await principal(req), "admin");
    return streamLive(req, reply, "fleet", {
      read: async () => ({
        nodes: (await listFleetNodes(deps.db)).map((n) => ({ ...presentNode(n), resident_sandboxes: n.residentSandboxes })),
        pools: (await listWarmPools(deps.db)).map(presentPool),
      }),
    });
  });

  app.get("/admin/api/v1/operations", async (req) => {
    requireScope(await principal(req), "admin");
    const page = await pageOfOperations(deps.db, "any", parseInput(ListOperationsQuery, req.query, "query"));
    return { operations: page.items.map((o) => ({ ...toOperation(o), tenant_id: o.tenantId })), next_cursor: page.nextCursor };
  });

  app.get("/admin/api/v1/placement/census", async (req) => {
    requireScope(await principal(req), "admin");
    return { gate: deps.gate, ...(await deps.census()), computed_at: new Date().toISOString() };
  });
}

async function liveSandboxes(service: SandboxService, tenantId: TenantId): Promise<{ sandboxes: Sandbox[]; truncated: boolean }> {
  const out: Sandbox[] = [];
  let cursor: string | null = null;
  do {
    const page = await service.list(tenantId, { states: LIVE, metadata: {}, order: "desc", limit: PAGE, ...(cursor ? { cursor } : {}) });
    out.push(...page.items.map((r) => toSandbox(r)));
    cursor = page.cursor;
  } while (cursor && out.length < MAX_LISTED);
  return { sandboxes: out.slice(0, MAX_LISTED), truncated: cursor !== null || out.length > MAX_LISTED };
}
