/**
 * `template.build` (Native): the build itself runs on a node, started and followed by the
 * API's BuildCoordinator (durable in the builds table, resumed after a restart); this
 * operation ends when the build does, with the build as its result, or fails naming the
 * step and message. Re-runnable: it only reads the build named in its target.
 */
import { notFound, SpaceError } from "../core/errors.ts";
import { getBuild } from "../store/templates.ts";
import { readRequest } from "./operation-kind.ts";
import { parseBuildTarget } from "./requests.ts";
import { toNativeBuild } from "./results.ts";
import { buildError } from "../templates/build-coordinator.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";

export function templateBuild(deps: HandlerDeps, pollMs = 500): OperationHandler {
  return async ({ op, signal }) => {
    readRequest("template.build", op.request);
    const buildId = parseBuildTarget(op.targetId);
    for (;;) {
      const b = await getBuild(deps.db, buildId).catch((e: unknown) => {
        throw SpaceError.from(e).code === "not_found" ? notFound(`build ${buildId} not found`) : e;
      });
      if (b.status === "ready") return toNativeBuild(b);
      if (b.status === "failed") {
        const err = buildError(b) ?? { message: "unknown error" };
        throw new SpaceError("failed_precondition", `build ${b.id} failed${err.step ? ` at step ${err.step}` : ""}: ${err.message}`);
      }
      signal.throwIfAborted();
      await new Promise((r) => setTimeout(r, pollMs));
    }
  };
}
