/**
 * node-api routes of volumes (wire: src/contract/volume-wire.ts), registered by app.ts.
 * Moves between nodes go through the blob store: `send` freezes the volume (a read-only
 * snapshot), streams it encrypted under a fresh data key wrapped by the cluster key (as
 * snapshots are), and `receive` on the new node fetches, checks and receives it.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { BlobStore } from "../../blob/blob-store.ts";
import { newDataKey, unwrapKey, wrapKey } from "../../core/envelope.ts";
import { SpaceError } from "../../core/errors.ts";
import { parseInput as parse } from "../../core/validate.ts";
import {
  NodeVolumeBody,
  VolumeCreateQuery,
  VolumeDirQuery,
  VolumeId,
  VolumeMetadataBody,
  VolumePathQuery,
  VolumeSend,
  VolumeSent,
} from "../../contract/volume-wire.ts";
import { fetchSubvolume, putSubvolume } from "../disk/subvolume-stream.ts";
import type { VolumeDisks } from "../disk/volume-disks.ts";

const Params = z.object({ id: VolumeId });

export interface VolumeRouteDeps {
  /** undefined until the agent started, or where the node has no btrfs cache (the process runtime). */
  volumes: () => VolumeDisks | undefined;
  blob: () => BlobStore | undefined;
  clusterKey: () => Buffer | undefined;
  /** Scratch directory for downloaded streams. */
  scratchDir: () => string;
}

export function registerVolumeRoutes(app: FastifyInstance, deps: VolumeRouteDeps, signalOf: (req: FastifyRequest) => AbortSignal): void {
  const vols = (): VolumeDisks => {
    const v = deps.volumes();
    if (!v) throw new SpaceError("failed_precondition", "volumes need the btrfs node cache (an isolated runtime) on this node");
    return v;
  };
  const blobs = (): BlobStore => {
    const b = deps.blob();
    if (!b) throw new SpaceError("failed_precondition", "this node has no blob store to move volumes through");
    return b;
  };
  const idOf = (req: FastifyRequest) => parse(Params, req.params, "path").id;

  app.put("/v1/volumes/:id", async (req) => vols().ensure(idOf(req), parse(NodeVolumeBody, req.body ?? {}, "volume").sizeMib, signalOf(req)));
  app.get("/v1/volumes/:id", async (req) => vols().status(idOf(req), signalOf(req)));
  app.delete("/v1/volumes/:id", async (req, reply) => {
    await vols().deleteVolume(idOf(req), signalOf(req));
    return reply.status(204).send();
  });

  app.post("/v1/volumes/:id/send", async (req) => {
    const id = idOf(req);
    const { key } = parse(VolumeSend, req.body ?? {}, "volume send");
    const signal = signalOf(req);
    const v = vols();
    const { sizeMib } = await v.status(id, signal);
    const frozen = await v.freeze(id, signal);
    try {
      const ck = deps.clusterKey();
      const dataKey = ck ? newDataKey() : undefined;
      const part = await putSubvolume(blobs(), key, frozen, { ...(dataKey ? { dataKey } : {}) }, signal);
      const sent: VolumeSent = { ...part, sizeMib, ...(dataKey && ck ? { wrappedKey: wrapKey(ck, dataKey) } : {}) };
      return sent;
    } finally {
      await v.dropFrozen(frozen, AbortSignal.timeout(60_000)).catch(() => undefined);
    }
  });

  app.post("/v1/volumes/:id/receive", async (req) => {
    const id = idOf(req);
    const sent = parse(VolumeSent, req.body ?? {}, "volume receive");
    const signal = signalOf(req);
    const v = vols();
    let dataKey: Buffer | undefined;
    if (sent.wrappedKey) {
      const ck = deps.clusterKey();
      if (!ck) throw new SpaceError("failed_precondition", "the volume stream is encrypted and this node has no SPACE_ENCRYPTION_KEY");
      dataKey = unwrapKey(ck, sent.wrappedKey);
    }
    const file = join(deps.scratchDir(), `${id}.btrfs`);
    try {
      await fetchSubvolume(blobs(), sent, file, v.receiveDir, dataKey, signal, "volume stream");
    } finally {
      await rm(file, { force: true });
    }
    return v.adoptReceived(id, sent.sizeMib, signal);
  });

  app.get("/v1/volumes/:id/dir", async (req) => {
    const q = parse(VolumeDirQuery, req.query ?? {}, "query");
    return vols().listDir(idOf(req), q.path, q.depth);
  });
  app.post("/v1/volumes/:id/dir", async (req, reply) => {
    const q = parse(VolumeCreateQuery, req.query ?? {}, "query");
    return reply.status(201).send(await vols().makeDir(idOf(req), q));
  });
  app.get("/v1/volumes/:id/path", async (req) => vols().getInfo(idOf(req), parse(VolumePathQuery, req.query ?? {}, "query").path));
  app.patch("/v1/volumes/:id/path", async (req) => {
    const { path } = parse(VolumePathQuery, req.query ?? {}, "query");
    return vols().updateMetadata(idOf(req), path, parse(VolumeMetadataBody, req.body ?? {}, "metadata"));
  });
  app.delete("/v1/volumes/:id/path", async (req, reply) => {
    await vols().removePath(idOf(req), parse(VolumePathQuery, req.query ?? {}, "query").path);
    return reply.status(204).send();
  });
  app.get("/v1/volumes/:id/file", async (req, reply) => {
    const { stream, size } = await vols().readFile(idOf(req), parse(VolumePathQuery, req.query ?? {}, "query").path);
    return reply.type("application/octet-stream").header("content-length", String(size)).send(stream);
  });

  // File bodies stream through unparsed, whatever their content type.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    scope.put("/v1/volumes/:id/file", async (req, reply) => {
      const q = parse(VolumeCreateQuery, req.query ?? {}, "query");
      return reply.status(201).send(await vols().writeFile(idOf(req), q, req.raw as Readable));
    });
  });
}
