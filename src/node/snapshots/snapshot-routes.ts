/** node-api routes of snapshots (wire: src/contract/snapshot-descriptor.ts), registered by node/api/app.ts. */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { SpaceError } from "../../core/errors.ts";
import { RestoreRequest, SnapshotId, SnapshotRequest } from "../../contract/snapshot-descriptor.ts";
import type { NodeSnapshots } from "./node-snapshots.ts";
import { parseInput as parse } from "../../core/validate.ts";

const Params = z.object({ id: z.string().regex(/^[a-z0-9]{20}$/, "a sandbox id") });
const SnapParams = z.object({ snapshotId: SnapshotId });


export function registerSnapshotRoutes(app: FastifyInstance, snapshots: () => NodeSnapshots | undefined, signalOf: (req: FastifyRequest) => AbortSignal): void {
  const snaps = (): NodeSnapshots => {
    const s = snapshots();
    if (!s) throw new SpaceError("unimplemented", "memory checkpoints need the runc runtime, CRIU 4.1+ (.tools/criu) and the btrfs node cache on this node");
    return s;
  };
  app.post("/v1/sandboxes/:id/suspend", async (req) => {
    const { id } = parse(Params, req.params, "path");
    const body = parse(SnapshotRequest, req.body ?? {}, "suspend");
    if (body.restoreAs.length) throw new SpaceError("invalid_argument", "restoreAs is for a live capture: a suspend's restores name the sandbox itself", { details: { field: "restoreAs" } });
    return snaps().suspend(id, body.snapshotId, { upload: body.upload, kind: body.kind }, signalOf(req));
  });
  app.post("/v1/sandboxes/:id/capture", async (req) => {
    const { id } = parse(Params, req.params, "path");
    const body = parse(SnapshotRequest, req.body ?? {}, "capture");
    if (body.kind !== "full") throw new SpaceError("invalid_argument", "a live capture keeps the memory: kind must be full", { details: { field: "kind" } });
    return snaps().capture(id, body.snapshotId, { upload: body.upload, restoreAs: body.restoreAs }, signalOf(req));
  });
  app.post("/v1/restores", async (req, reply) => {
    const body = parse(RestoreRequest, req.body ?? {}, "restore");
    const st = await snaps().restore(body.spec, body.snapshot, signalOf(req));
    return reply.status(201).send(st);
  });
  app.post("/v1/snapshots/:snapshotId/publish", async (req) => {
    const { snapshotId } = parse(SnapParams, req.params, "path");
    return snaps().publish(snapshotId, signalOf(req));
  });
  app.get("/v1/snapshots", async () => ({ snapshots: await snaps().listLocal() }));
  app.delete("/v1/snapshots/:snapshotId", async (req, reply) => {
    const { snapshotId } = parse(SnapParams, req.params, "path");
    await snaps().dropLocal(snapshotId);
    return reply.status(204).send();
  });
}
