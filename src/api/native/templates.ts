/**
 * /v1/templates: the templates a tenant may use (its own, the platform's, public ones),
 * each with its builds and its aliases (releases: alias + tag → build). Reads only, scope
 * `templates:read`: builds are started through the ECW template API (the e2b SDK's
 * `Template` builder) or `space template build`, not through Native operations yet.
 *
 *   GET /v1/templates         → { templates: [Template] }        (own first)
 *   GET /v1/templates/{id}    → Template  (id, or a name: own first) | 404
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { notFound } from "../../core/errors.ts";
import type { TenantId } from "../../core/ids.ts";
import type { Queryable } from "../../store/db.ts";
import { listBuilds, listReleases, listTemplates, type Build, type Release, type Template } from "../../store/templates.ts";
import type { NativeDeps } from "./deps.ts";
import { parse, tenantWith } from "./http.ts";

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

const TemplateParams = z.object({ id: z.string().min(1).max(200) });

function toBuild(b: Build) {
  return {
    id: b.id,
    status: b.status,
    vcpu: b.vcpu,
    memory_mib: b.memoryMib,
    disk_mib: b.diskMib,
    rootfs_size_mib: b.rootfsSizeMib,
    environment: b.environment,
    digest: b.digest,
    error: b.error,
    created_at: iso(b.createdAt),
    started_at: iso(b.startedAt),
    finished_at: iso(b.finishedAt),
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
    builds: builds.map(toBuild),
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
}
