/**
 * /v1/operations: get one (with `?wait=30s` long-poll that answers as soon as the
 * operation ends), list this tenant's (newest first, cursor pages).
 */
import type { FastifyInstance } from "fastify";
import { getOperation, isOperationDone, listOperations, waitForOperation } from "../../store/operations.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, tenantWithAny } from "./native-edge.ts";
import { toOperation } from "./native-present.ts";
import { GetOperationQuery, ListOperationsQuery, OperationParams } from "./native-schemas.ts";
import type { Scope } from "../auth.ts";
import type { z } from "zod";
import type { Db } from "../../store/db.ts";
import type { TenantId } from "../../core/ids.ts";

/** Whoever may cause or read operations may read them. */
const READ_SCOPES: readonly Scope[] = ["sandboxes:read", "sandboxes:write", "commands:exec", "volumes:read", "volumes:write"];

export function registerOperationRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.get("/v1/operations/:id", async (req, reply) => {
    const tenantId = await tenantWithAny(deps, req, READ_SCOPES);
    const { id } = parse(OperationParams, req.params, "path");
    const q = parse(GetOperationQuery, req.query, "query");
    let op = await getOperation(deps.db, id, tenantId);
    if (q.wait && !isOperationDone(op)) {
      const gone = new AbortController();
      const onClose = () => gone.abort();
      reply.raw.once("close", onClose);
      try {
        op = await waitForOperation(deps.db, id, { timeoutMs: q.wait, tenantId, signal: gone.signal, pollMs: 500 });
      } catch (e) {
        if (!gone.signal.aborted) throw e;
      } finally {
        reply.raw.off("close", onClose);
      }
    }
    return toOperation(op);
  });

  app.get("/v1/operations", async (req) => {
    const tenantId = await tenantWithAny(deps, req, READ_SCOPES);
    const page = await pageOfOperations(deps.db, tenantId, parse(ListOperationsQuery, req.query, "query"));
    return { operations: page.items.map(toOperation), next_cursor: page.nextCursor };
  });
}

/** One page of operations, newest first, as `GET /v1/operations` filters them (the operator's list reads every tenant's). */
export function pageOfOperations(db: Db, tenantId: TenantId | "any", q: z.infer<typeof ListOperationsQuery>) {
  return listOperations(db, {
    tenantId,
    order: "desc",
    limit: q.limit,
    ...(q.cursor ? { cursor: q.cursor } : {}),
    ...(q.state ? { states: [q.state] } : {}),
    ...(q.kind ? { kind: q.kind } : {}),
    ...(q.target ? { targetId: q.target } : {}),
  });
}
