/**
 * /v1/sandboxes: create (an operation), get (live ones, and failed ones with their reason),
 * list (cursor pages), delete (an operation).
 */
import type { FastifyInstance } from "fastify";
import { newSandboxId, type SandboxId, type TenantId } from "../../core/ids.ts";
import { endedStates } from "../../sandboxes/model.ts";
import { sandboxStates, type SandboxState } from "../../store/sandboxes.ts";
import { invalid } from "../../core/errors.ts";
import { sandboxTarget } from "../../operations/requests.ts";
import { toCreateInput } from "../../operations/sandbox-create.ts";
import { toSandbox, toSandboxVolumes } from "../../operations/results.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, submit, tenantWith } from "./native-edge.ts";
import { admitMounts } from "./native-volumes.ts";
import { compileNative, egressPolicyOf } from "../../sandboxes/egress-rules.ts";
import { proposeAllowList } from "../../contract/egress-policy.ts";
import { CreateSandboxBody, ListSandboxesQuery, SandboxIdParams } from "./native-schemas.ts";

export const DEFAULT_CREATE_DEADLINE_MS = 30 * 60 * 1000;
const LIVE: readonly SandboxState[] = sandboxStates.filter((s) => !endedStates.includes(s));

export function registerSandboxRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.post("/v1/sandboxes", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "sandboxes:write");
    // Every field has a default, but a create says so: `{}` (a lost or empty body is not a create).
    if (req.body === undefined) throw invalid("invalid body: a JSON object is required (send {} for every default)", { field: "body" });
    const body = parse(CreateSandboxBody, req.body, "body");
    // A policy that does not compile (bad target, port range) is a 400 now, not a failed operation later.
    if (body.network) compileNative(body.network);
    const input = toCreateInput(body);
    await deps.limiter?.admit(tenantId, req.headers.authorization ?? null);
    return submit(deps, req, reply, {
      tenantId,
      kind: "sandbox.create",
      // The id is chosen now so the operation names its sandbox from the first answer.
      target: sandboxTarget(newSandboxId()),
      request: body,
      deadlineMs: deps.createDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS,
      // Mounts with bad paths, or naming no volume of the tenant, are a 400/404 now too (after the replay check: a retried create replays).
      admit: () => admitMounts(deps, tenantId, input.volumeMounts ?? []),
      // A warm member claimed now: the operation names it, and the create adopts it (not one that mounts volumes: it is placed by them).
      reserve: async () => {
        if (input.volumeMounts?.length) return null;
        const id = await deps.sandboxes.reserveWarm(tenantId, input, AbortSignal.timeout(10_000));
        return id ? { target: sandboxTarget(id), release: () => deps.sandboxes.releaseWarm(tenantId, id) } : null;
      },
    });
  });

  app.get("/v1/sandboxes/:id", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "sandboxes:read");
    const { id } = parse(SandboxIdParams, req.params, "path");
    // A failed sandbox stays readable (state and reason: why it is gone, e.g. the node's
    // watchdog found it unhealthy); a killed one is not found, as every other route says.
    const rec = await deps.sandboxes.repo.get(tenantId, id as SandboxId);
    if (rec?.state === "failed") return toSandbox(rec);
    const live = await deps.sandboxes.get(tenantId, id);
    const mounts = (await deps.sandboxes.volumes?.mountsOf(live.id)) ?? [];
    return { ...toSandbox(live, await deps.sandboxes.resumeSnapshot(live)), volumes: toSandboxVolumes(mounts) };
  });

  app.get("/v1/sandboxes/:id/network", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "sandboxes:read");
    const { id } = parse(SandboxIdParams, req.params, "path");
    const rec = await deps.sandboxes.get(tenantId, id);
    const { observed, denied } = await deps.sandboxes.networkRecord(tenantId, id);
    const mode = egressPolicyOf(rec.allowInternetAccess, rec.network).mode ?? "enforce";
    return { mode, observed, denied, proposed_network: proposeAllowList(observed) };
  });

  app.get("/v1/sandboxes", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "sandboxes:read");
    const q = parse(ListSandboxesQuery, req.query, "query");
    const states = q.state ? parseStates(q.state) : LIVE;
    const page = await deps.sandboxes.list(tenantId, {
      states,
      metadata: {},
      order: "asc",
      limit: q.limit,
      ...(q.cursor ? { cursor: q.cursor } : {}),
    });
    return { sandboxes: page.items.map((r) => toSandbox(r)), next_cursor: page.cursor };
  });

  app.delete("/v1/sandboxes/:id", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "sandboxes:write");
    const { id } = parse(SandboxIdParams, req.params, "path");
    return submit(deps, req, reply, {
      tenantId,
      kind: "sandbox.delete",
      target: sandboxTarget(id),
      request: { sandbox_id: id },
      deadlineMs: deps.operationDeadlineMs ?? DEFAULT_CREATE_DEADLINE_MS,
      admit: () => exists(deps, tenantId, id),
    });
  });
}

/** 404 for a sandbox that is not this tenant's or not live (before anything is queued). */
export async function exists(deps: NativeDeps, tenantId: TenantId, id: string): Promise<void> {
  await deps.sandboxes.get(tenantId, id);
}

function parseStates(s: string): SandboxState[] {
  const out: SandboxState[] = [];
  for (const part of s.split(",").map((x) => x.trim()).filter(Boolean)) {
    if (!(sandboxStates as readonly string[]).includes(part)) {
      throw invalid(`state=${JSON.stringify(part)} is not one of ${sandboxStates.join(", ")}`, { field: "state" });
    }
    out.push(part as SandboxState);
  }
  return out;
}
