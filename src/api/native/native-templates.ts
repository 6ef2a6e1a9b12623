/**
 * /v1/templates: the templates a tenant may use (its own, the platform's, public ones),
 * each with its builds and its aliases (releases: alias + tag → build), scope
 * `templates:read`; builds as operations, scope `templates:write`.
 *
 *   GET  /v1/templates                         → { templates: [Template] }        (own first)
 *   GET  /v1/templates/{id}                    → Template  (id, or a name: own first) | 404
 *   POST /v1/templates/{name}/builds           BuildTemplateBody → 202 Operation `template.build`
 *                                              (the template is created on first use; the
 *                                              operation succeeds with the ready build)
 *   GET  /v1/templates/{id}/builds/{build_id}  → Build with its log lines from `?logs_offset=`
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { invalid, notFound, SpaceError } from "../../core/errors.ts";
import type { TenantId } from "../../core/ids.ts";
import type { Queryable } from "../../store/db.ts";
import { getBuild, listBuilds, listReleases, listTemplates, newBuildId, type Release, type Template } from "../../store/templates.ts";
import { BuildCoordinator, type TemplateBuildStart } from "../../templates/build-coordinator.ts";
import { BuildTemplateBody, buildTarget } from "../../operations/requests.ts";
import { toNativeBuild } from "../../operations/results.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, submit, tenantWith } from "./native-edge.ts";

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

const TemplateParams = z.object({ id: z.string().min(1).max(200) });
const BuildParams = z.object({ name: z.string().min(1).max(200) });
const BuildGetParams = z.object({ id: z.string().min(1).max(200), build_id: z.string().min(1).max(100) });

const BUILD_DEADLINE_MS = 2 * 60 * 60_000;

function toBuildStart(b: BuildTemplateBody): TemplateBuildStart {
  if (b.from_template && b.from_image) throw invalid("give from_template or from_image, not both");
  if (b.capture_after_ready && !b.start_cmd) throw invalid("capture_after_ready needs a start_cmd");
  return {
    ...(b.from_template ? { fromTemplate: b.from_template } : {}),
    ...(b.from_image ? { fromImage: b.from_image } : {}),
    steps: b.steps.map((s) => ({ type: s.type, args: s.args })),
    ...(b.start_cmd ? { startCmd: b.start_cmd } : {}),
    ...(b.ready_cmd ? { readyCmd: b.ready_cmd } : {}),
    ...(b.capture_after_ready ? { captureAfterReady: true } : {}),
    force: b.force,
  };
}

function toAlias(r: Release) {
  return { alias: r.alias, tag: r.tag, build_id: r.buildId, updated_at: iso(r.updatedAt) };
}

async function present(q: Queryable, t: Template, tenantId: TenantId) {
  const [builds, releases] = await Promise.all([listBuilds(q, t.id), listReleases(q, t.id)]);
  return {
    id: t.id,
    name: t.name,
    public: t.public,
    /** own: the caller's tenant; platform: shipped with SPACE; shared: another tenant's public template. */
    owner: t.tenantId === tenantId ? "own" : t.tenantId === null ? "platform" : "shared",
    aliases: releases.map(toAlias),
    builds: builds.map(toNativeBuild),
    created_at: iso(t.createdAt),
    updated_at: iso(t.updatedAt),
  };
}

export function registerTemplateRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.get("/v1/templates", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "templates:read");
    const out = [];
    for (const t of await listTemplates(deps.db, tenantId)) out.push(await present(deps.db, t, tenantId));
    return { templates: out };
  });

  app.get("/v1/templates/:id", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "templates:read");
    const { id } = parse(TemplateParams, req.params, "path");
    // Visible templates only (a private template of another tenant is not found, not forbidden).
    const ts = await listTemplates(deps.db, tenantId);
    const t = ts.find((x) => x.id === id) ?? ts.find((x) => x.name === id);
    if (!t) throw notFound(`template ${id} not found`);
    return present(deps.db, t, tenantId);
  });

  app.post("/v1/templates/:name/builds", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "templates:write");
    const { name } = parse(BuildParams, req.params, "path");
    const body = parse(BuildTemplateBody, req.body, "build");
    const builds = deps.builds;
    if (!builds) throw new SpaceError("unimplemented", "this API process does not run template builds");
    const start = toBuildStart(body);
    const buildId = newBuildId();
    let created: string | undefined;
    const sent = await submit(deps, req, reply, {
      tenantId,
      kind: "template.build",
      target: buildTarget(buildId),
      request: { name, ...body },
      deadlineMs: BUILD_DEADLINE_MS,
      // A bad source, step or unknown base template is a 400/404 now, not a failed operation later.
      admit: async () => {
        await builds.toRecipe(tenantId, "native", start, { vcpu: null, memoryMib: null });
      },
      also: async (tx) => {
        const r = await builds.requestIn(tx, tenantId, { name, tags: body.tags, ...(body.vcpu ? { cpuCount: body.vcpu } : {}), ...(body.memory_mib ? { memoryMB: body.memory_mib } : {}) }, buildId);
        created = r.template.id;
      },
    });
    // Started after the operation and its build are committed; a failed start fails the build (and so the operation).
    if (created) void builds.start(tenantId, created, buildId, start).catch((e: unknown) => deps.log.warn({ buildId, err: e }, "native template build did not start"));
    return sent;
  });

  app.get("/v1/templates/:id/builds/:build_id", async (req) => {
    const { tenantId } = await tenantWith(deps, req, "templates:read");
    const { id, build_id } = parse(BuildGetParams, req.params, "path");
    const { logs_offset } = parse(z.object({ logs_offset: z.coerce.number().int().min(0).default(0) }), req.query ?? {}, "query");
    const ts = await listTemplates(deps.db, tenantId);
    const t = ts.find((x) => x.id === id) ?? ts.find((x) => x.name === id);
    const b = t ? await getBuild(deps.db, build_id).catch(() => undefined) : undefined;
    if (!t || !b || b.templateId !== t.id) throw notFound(`build ${build_id} of template ${id} not found`);
    return { ...toNativeBuild(b), logs: BuildCoordinator.entries(b, logs_offset) };
  });
}
