/**
 * ECW template endpoints (e2b-wire.md §2), what the e2b SDK's `Template` builder calls:
 *
 *   POST   /v3/templates                               {name, tags?, cpuCount?, memoryMB?} → 202 TemplateRequestResponseV3
 *   GET    /templates/{id}/files/{hash}                → 201 {present, url?} (COPY uploads)
 *   PUT    /templates/{id}/files/{hash}?expires&token  raw tar(.gz) (signed URL, no API key)
 *   POST   /v2/templates/{id}/builds/{buildID}         TemplateBuildStartV2 → 202
 *   GET    /templates/{id}/builds/{buildID}/status     ?logsOffset → TemplateBuildInfo
 *   GET    /templates/aliases/{alias}                  → {templateID, public} (built-ins: public) | 404 none | 403 not yours
 *   POST   /templates/tags  {target:"name:tag", tags}  → 201 {buildID, tags}
 *   DELETE /templates/tags  {name, tags}               → 204
 *   GET    /templates/{id}/tags                        → [{tag, buildID, createdAt}]
 *   GET    /templates                                  → [{templateID, buildID, aliases, public, ...}]
 *   DELETE /templates/{id}                             → 204 | 404 (a named snapshot's id too: the SDK's deleteSnapshot)
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import { notFound, SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { TenantId } from "../../core/ids.ts";
import type { Db } from "../../store/db.ts";
import type { BlobStore } from "../../blob/blob-store.ts";
import {
  deleteRelease,
  deleteTemplate,
  findOwnTemplate,
  findTemplateByName,
  listBuilds,
  listReleases,
  listTemplates,
  resolveTemplate,
  setRelease,
  type Build,
  type Template,
} from "../../store/templates.ts";
import { BUILT_IN_TEMPLATES, BuildCoordinator, buildError, filesBlobKey, parseNameTag, TemplateBuildStart, validateTag } from "../../templates/build-coordinator.ts";
import type { ApiKeyAuth } from "../../sandboxes/model.ts";
import type { SandboxService } from "../../sandboxes/service.ts";
import { installEcwEdge, parse, sendEcwError, tenantOf } from "./ecw-edge.ts";

export interface EcwTemplateDeps {
  db: Db;
  blobs: BlobStore;
  builds: BuildCoordinator;
  apiKeys: ApiKeyAuth;
  log: Logger;
  /** Named snapshots (`sn_` ids), which the SDK deletes through this route. */
  snapshots?: Pick<SandboxService, "deleteNamedSnapshot">;
}

const RequestBuild = z.object({
  name: z.string().min(1).optional(),
  alias: z.string().min(1).optional(),
  tags: z.array(z.string()).optional(),
  cpuCount: z.number().int().positive().optional(),
  memoryMB: z.number().int().positive().optional(),
  minFreeDiskMb: z.number().int().optional(),
  teamID: z.string().optional(),
});
const TagsAssign = z.object({ target: z.string().min(1), tags: z.array(z.string().min(1)).min(1) });
const TagsRemove = z.object({ name: z.string().min(1), tags: z.array(z.string().min(1)).min(1) });
const UPLOAD_TTL_S = 3600;

/** E2B build status names. */
const toE2bStatus = (s: Build["status"]) => (s === "failed" ? "error" : s);

export async function registerEcwTemplateRoutes(app: FastifyInstance, deps: EcwTemplateDeps): Promise<void> {
  const { db, builds } = deps;

  // The signed upload URL: the SDK sends no API key there, and the body is a raw stream.
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_req, _payload, done) => done(null, undefined));
    scope.put("/templates/:templateID/files/:hash", async (req, reply) => {
      const { templateID, hash } = req.params as { templateID: string; hash: string };
      const q = req.query as { expires?: string; token?: string };
      if (!q.token || !builds.checkUploadToken(templateID, hash, Number(q.expires), q.token)) return sendEcwError(reply, 401, "invalid or expired upload signature");
      const info = await deps.blobs.put(filesBlobKey(templateID, hash), req.raw);
      return reply.code(201).send({ sizeBytes: info.sizeBytes });
    });
  });

  await app.register(async (scope) => {
    installEcwEdge(scope, deps.apiKeys, deps.log);

    /** A template of the tenant by id or name (own only: mutations). */
    const ownTemplate = async (tenantId: TenantId, idOrName: string): Promise<Template> => {
      const t = await findOwnTemplate(db, tenantId, idOrName);
      if (!t) throw notFound(`template ${idOrName} not found`);
      return t;
    };

    scope.post("/v3/templates", async (req, reply) => {
      const body = parse(RequestBuild, req.body, "body");
      const name = body.name ?? body.alias;
      if (!name) throw new SpaceError("invalid_argument", "name is required");
      const r = await builds.request(tenantOf(req), { name, ...(body.tags ? { tags: body.tags } : {}), ...(body.cpuCount ? { cpuCount: body.cpuCount } : {}), ...(body.memoryMB ? { memoryMB: body.memoryMB } : {}) });
      return reply.code(202).send({
        templateID: r.template.id,
        buildID: r.build.id,
        names: [r.template.name],
        aliases: [r.template.name],
        tags: r.tags,
        public: r.template.public,
      });
    });

    scope.get("/templates/:templateID/files/:hash", async (req, reply) => {
      const { templateID, hash } = req.params as { templateID: string; hash: string };
      const t = await ownTemplate(tenantOf(req), templateID);
      const have = await deps.blobs.head(filesBlobKey(t.id, hash));
      if (have) return reply.code(201).send({ present: true });
      const expires = Math.floor(Date.now() / 1000) + UPLOAD_TTL_S;
      const token = builds.uploadToken(t.id, hash, expires);
      const url = `${originOf(req)}/templates/${encodeURIComponent(t.id)}/files/${encodeURIComponent(hash)}?expires=${expires}&token=${token}`;
      return reply.code(201).send({ present: false, url });
    });

    scope.post("/v2/templates/:templateID/builds/:buildID", async (req, reply) => {
      const { templateID, buildID } = req.params as { templateID: string; buildID: string };
      const body = parse(TemplateBuildStart, req.body, "body");
      await builds.start(tenantOf(req), templateID, buildID, body);
      return reply.code(202).send();
    });

    scope.get("/templates/:templateID/builds/:buildID/status", async (req) => {
      const { templateID, buildID } = req.params as { templateID: string; buildID: string };
      const { logsOffset } = parse(z.object({ logsOffset: z.coerce.number().int().min(0).default(0), level: z.string().optional() }), req.query, "query");
      const b = await builds.ownBuild(tenantOf(req), templateID, buildID);
      const err = buildError(b);
      return {
        templateID,
        buildID,
        status: toE2bStatus(b.status),
        logEntries: BuildCoordinator.entries(b, logsOffset),
        logs: [],
        ...(b.status === "failed" && err ? { reason: { message: err.message, ...(err.step ? { step: err.step } : {}), logEntries: [] } } : {}),
      };
    });

    scope.get("/templates/aliases/:alias", async (req, reply) => {
      const { alias } = req.params as { alias: string };
      const tenantId = tenantOf(req);
      const t = await findTemplateByName(db, alias, tenantId);
      // What nodes provide themselves (`base`) has no row; E2B's own are public to every team.
      if (!t && BUILT_IN_TEMPLATES.has(alias)) return { templateID: alias, public: true };
      if (!t) return sendEcwError(reply, 404, `template alias ${alias} not found`);
      if (t.tenantId !== tenantId && t.tenantId !== null && !t.public) return sendEcwError(reply, 403, `template alias ${alias} belongs to another team`);
      return { templateID: t.id, public: t.public };
    });

    scope.post("/templates/tags", async (req, reply) => {
      const body = parse(TagsAssign, req.body, "body");
      const tenantId = tenantOf(req);
      const { alias, tag: from } = parseNameTag(body.target, "target");
      for (const tag of body.tags) validateTag(tag, "tags:");
      const t = await ownTemplate(tenantId, alias);
      const r = await resolveTemplate(db, tenantId, from !== undefined ? `${t.name}:${from}` : t.id);
      for (const tag of body.tags) await setRelease(db, { tenantId, templateId: t.id, alias: t.name, tag, buildId: r.build.id });
      return reply.code(201).send({ buildID: r.build.id, tags: body.tags });
    });

    scope.delete("/templates/tags", async (req, reply) => {
      const body = parse(TagsRemove, req.body, "body");
      const tenantId = tenantOf(req);
      const { alias } = parseNameTag(body.name, "name");
      for (const tag of body.tags) validateTag(tag, "tags:");
      const t = await ownTemplate(tenantId, alias);
      for (const tag of body.tags) await deleteRelease(db, tenantId, t.name, tag);
      return reply.code(204).send();
    });

    scope.get("/templates/:templateID/tags", async (req) => {
      const { templateID } = req.params as { templateID: string };
      const t = await ownTemplate(tenantOf(req), templateID);
      return (await listReleases(db, t.id)).map((r) => ({ tag: r.tag, buildID: r.buildId, createdAt: r.createdAt.toISOString() }));
    });

    scope.get("/templates", async (req) => {
      const tenantId = tenantOf(req);
      const out = [];
      for (const t of await listTemplates(db, tenantId)) {
        const bs = await listBuilds(db, t.id);
        const last = [...bs].reverse().find((b) => b.status === "ready") ?? bs[bs.length - 1];
        out.push({
          templateID: t.id,
          buildID: last?.id ?? "",
          aliases: [t.name],
          names: [t.name],
          public: t.public,
          buildStatus: last ? toE2bStatus(last.status) : "waiting",
          buildCount: bs.length,
          cpuCount: last?.vcpu ?? 2,
          memoryMB: last?.memoryMib ?? 512,
          diskSizeMB: last?.rootfsSizeMib ?? 0,
          envdVersion: "0.6.13",
          createdAt: t.createdAt.toISOString(),
          updatedAt: t.updatedAt.toISOString(),
          lastSpawnedAt: null,
          spawnCount: 0,
          createdBy: null,
        });
      }
      return out;
    });

    scope.delete("/templates/:templateID", async (req, reply) => {
      const { templateID } = req.params as { templateID: string };
      const tenantId = tenantOf(req);
      if (templateID.startsWith("sn_") && deps.snapshots) {
        const gone = await deps.snapshots.deleteNamedSnapshot(tenantId, templateID);
        // Its parts are its own (keys under the snapshot); best effort, a leftover is only storage.
        await Promise.all(
          (gone.descriptor?.parts ?? []).map((p) =>
            deps.blobs.delete(p.key).catch((e: unknown) => deps.log.warn({ err: e, snapshotId: gone.id, key: p.key }, "could not delete a snapshot part")),
          ),
        );
        return reply.code(204).send();
      }
      const t = await ownTemplate(tenantId, templateID);
      const bs = await listBuilds(db, t.id);
      await deleteTemplate(db, t.id, tenantId);
      await builds.forgetOnNodes(t.id, bs.map((b) => b.id));
      return reply.code(204).send();
    });
  });
}

function originOf(req: FastifyRequest): string {
  const host = req.headers.host ?? "127.0.0.1";
  return `${req.protocol}://${host}`;
}
