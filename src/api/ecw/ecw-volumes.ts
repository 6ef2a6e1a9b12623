/**
 * E2B volumes (e2b-wire.md §2, docs/volumes.md): `POST|GET /volumes`, `GET|DELETE
 * /volumes/{volumeID}` behind the API key, and the volume content API `…/volumecontent/
 * {volumeID}/{dir,path,file}` behind the volume's own token (`Authorization: Bearer`), which
 * the e2b SDK's `Volume` object calls with no sandbox running. Content calls are forwarded
 * as they are to node-api on the volume's node (contract/volume-wire.ts), bodies streamed.
 */
import { Readable } from "node:stream";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { toNodeError } from "../../substrate/node-client.ts";
import type { SandboxVolumes, Volume } from "../../sandboxes/volume-service.ts";
import { installEcwEdge, parse, sendEcwError, tenantOf } from "./ecw-edge.ts";

// The name's rules are the service's (validateVolumeName), whose refusal names the value; the bound only caps what is echoed.
export const NewVolume = z.looseObject({ name: z.string().max(256) });
const VolumeParams = z.object({ volumeID: z.string().min(1).max(64) });
const CONTENT_ROUTES = ["dir", "path", "file"] as const;

export interface EcwVolumeDeps {
  volumes: SandboxVolumes;
  /** The `domain` E2B's SDK sends content calls to (`https://api.<domain>`); undefined = the client's own. */
  volumeDomain: string | undefined;
}

export const toVolume = (v: Volume) => ({ volumeID: v.id, name: v.name });
const toVolumeAndToken = (v: Volume, domain: string | undefined) => ({ ...toVolume(v), token: v.token, ...(domain ? { domain } : {}) });

/** The API-key routes (registered in the ECW scope). */
export function registerVolumeRoutes(app: FastifyInstance, deps: EcwVolumeDeps): void {
  app.post("/volumes", async (req, reply) => {
    const { name } = parse(NewVolume, req.body, "volume create body");
    const v = await deps.volumes.create(tenantOf(req), name);
    return reply.code(201).send(toVolumeAndToken(v, deps.volumeDomain));
  });
  app.get("/volumes", async (req) => (await deps.volumes.list(tenantOf(req))).map(toVolume));
  app.get("/volumes/:volumeID", async (req) => {
    const { volumeID } = parse(VolumeParams, req.params, "path");
    return toVolumeAndToken(await deps.volumes.get(tenantOf(req), volumeID), deps.volumeDomain);
  });
  app.delete("/volumes/:volumeID", async (req, reply) => {
    const { volumeID } = parse(VolumeParams, req.params, "path");
    await deps.volumes.delete(tenantOf(req), volumeID, AbortSignal.timeout(120_000));
    return reply.code(204).send();
  });
}

/** The content API, in its own scope: bodies unparsed (streamed to the node) and the volume token instead of an API key. */
export async function registerVolumeContentRoutes(app: FastifyInstance, deps: EcwVolumeDeps & { log: Logger }): Promise<void> {
  await app.register(async (scope) => {
    // The edge's error body; its API-key hook is not installed here (the token is checked per volume).
    installEcwEdge(scope, null, deps.log);
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    for (const route of CONTENT_ROUTES) {
      scope.all(`/volumecontent/:volumeID/${route}`, (req, reply) => forward(deps.volumes, route, req, reply));
    }
  });
}

const METHODS: Record<(typeof CONTENT_ROUTES)[number], readonly string[]> = {
  dir: ["GET", "POST"],
  path: ["GET", "PATCH", "DELETE"],
  file: ["GET", "PUT"],
};

async function forward(volumes: SandboxVolumes, route: (typeof CONTENT_ROUTES)[number], req: FastifyRequest, reply: FastifyReply) {
  if (!METHODS[route].includes(req.method)) return sendEcwError(reply, 405, `${req.method} is not allowed on /volumecontent/{volumeID}/${route}`);
  const { volumeID } = parse(VolumeParams, req.params, "path");
  const auth = req.headers.authorization;
  const token = auth?.startsWith("Bearer ") ? auth.slice(7) : "";
  if (!token) return sendEcwError(reply, 401, "the volume content API needs Authorization: Bearer <volume token>");
  const ac = new AbortController();
  // A caller that goes away mid-transfer ends the node call; one whose answer was sent does not.
  reply.raw.once("close", () => {
    if (!reply.raw.writableFinished) ac.abort();
  });
  const signal = AbortSignal.any([ac.signal, AbortSignal.timeout(60 * 60_000)]);
  // A wrong token and another tenant's volume look the same: not found.
  const target = await volumes.contentTarget(volumeID, token, signal);
  const query = req.raw.url!.includes("?") ? req.raw.url!.slice(req.raw.url!.indexOf("?")) : "";
  const hasBody = req.method === "PUT" || req.method === "PATCH";
  let res: Response;
  try {
    res = await fetch(`${target.baseUrl.href}/${route}${query}`, {
      method: req.method,
      headers: { ...target.headers, ...(hasBody ? { "content-type": req.method === "PATCH" ? "application/json" : "application/octet-stream" } : {}) },
      ...(hasBody ? { body: Readable.toWeb(req.raw) as ReadableStream, duplex: "half" } : {}),
      signal,
    } as RequestInit);
  } catch (e) {
    throw new SpaceError("unavailable", `the volume's node did not answer: ${(e as Error).message}`, { cause: e });
  }
  if (!res.ok) throw toNodeError(res.status, await res.text(), `volume content ${req.method} ${route}`);
  void reply.code(res.status);
  const type = res.headers.get("content-type");
  if (type) void reply.type(type);
  const length = res.headers.get("content-length");
  if (length) void reply.header("content-length", length);
  if (!res.body) return reply.send("");
  const body = Readable.fromWeb(res.body as import("node:stream/web").ReadableStream);
  body.on("error", (e) => req.log.debug({ err: e }, "volume content stream ended early"));
  return reply.send(body);
}
