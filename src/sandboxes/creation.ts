/**
 * Creates: a template (or a named snapshot) resolved, the shape and placement
 * validated, a warm member adopted when a pool has one, else a cold boot: insert the
 * row, place, start on the node, `creating → running`. A create that fails leaves the
 * row `failed` and nothing on any node.
 */
import { randomBytes } from "node:crypto";
import { SpaceError, invalid, notFound, publicMessage, unimplemented } from "../core/errors.ts";
import { secondsSince, type CreatePath } from "../core/metrics.ts";
import { inChildSpan, inSpan } from "../core/tracing.ts";
import { newExecutionId, newSandboxId, type NodeId, type SandboxId, type TenantId } from "../core/ids.ts";
import type { SandboxSpec } from "../contract/node-api.ts";
import { setTimeout as sleep } from "node:timers/promises";
import type { PlacementRequest, SandboxRef } from "../substrate/substrate.ts";
import { egressPolicyOf } from "./egress-rules.ts";
import {
  effectiveInternetAccess,
  parsePlacement,
  PLACEMENT_METADATA_KEY,
  validateResources,
  validateTimeout,
  type CreateInput,
} from "./create-input.ts";
import type { SandboxForks } from "./forks.ts";
import type { SandboxRecord } from "./model.ts";
import type { SandboxResources } from "./resources.ts";
import type { AdoptRequest, WarmAdopter } from "./warm-adopter.ts";
import { validateVolumeMounts } from "./volume-service.ts";

export class SandboxCreation {
  readonly #r: SandboxResources;
  readonly #forks: SandboxForks;
  /** Warm-pool adoption; null = every create boots cold. */
  readonly #warm: WarmAdopter | null;

  constructor(r: SandboxResources, forks: SandboxForks, warm: WarmAdopter | null) {
    this.#r = r;
    this.#forks = forks;
    this.#warm = warm;
  }

  /** Template, shape and placement of a create, validated (400/404 like the create itself). */
  async #plan(tenantId: TenantId, input: CreateInput): Promise<Omit<AdoptRequest, "input"> | null> {
    const template = input.resolvedTemplate ?? (await this.#r.templates.resolve(tenantId, input.template));
    if (!template) return null;
    const vcpu = input.resources.vcpu ?? this.#r.defaults.vcpu;
    const memoryMib = input.resources.memoryMib ?? this.#r.defaults.memoryMib;
    const diskMib = input.resources.diskMib ?? this.#r.defaults.diskMib;
    validateResources({ vcpu, memoryMib, diskMib }, template.rootfsSizeMib, template.templateId);
    validateTimeout(input.timeoutSec);
    egressPolicyOf(input.allowInternetAccess, input.network); // 400 on a bad network policy
    const placement = input.placement ?? parsePlacement(input.metadata[PLACEMENT_METADATA_KEY]);
    return { template, vcpu, memoryMib, diskMib, placement };
  }

  /**
   * Native admission: claims a warm member for a create that runs later as an operation
   * (its id becomes the operation's target; `create` with that `id` adopts it). null when
   * there is none or the create would not adopt (it then runs cold, or fails with its
   * own error later). Never throws: a reservation is only a head start.
   */
  async reserveWarm(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxId | null> {
    if (!this.#warm || input.adopt === false || input.template.startsWith("sn_") || input.volumeMounts?.length) return null;
    try {
      if (!(await this.#warm.hasPools())) return null;
      const plan = await this.#plan(tenantId, input);
      return plan ? await this.#warm.reserve(tenantId, plan, signal) : null;
    } catch (e: unknown) {
      this.#r.log.debug({ err: e, tenantId }, "no warm reservation");
      return null;
    }
  }

  /** Whether `id` is a warm member reserved for this tenant's create (not yet adopted). */
  async isReservedWarm(tenantId: TenantId, id: SandboxId): Promise<boolean> {
    return this.#warm ? this.#warm.isReserved(id, tenantId) : false;
  }

  /** Hands an unused reservation back to its pool (best effort; the pool's TTL is the backstop). */
  async releaseWarm(tenantId: TenantId, id: SandboxId): Promise<void> {
    await this.#warm?.release(id, tenantId).catch((e: unknown) => this.#r.log.warn({ err: e, sandboxId: id }, "could not release a warm reservation"));
  }

  /**
   * One create, in a span: its latency by path when it succeeds, its reason code when it
   * fails. Warm-pool refills (background) are the pool's own metric (space_warm_pool_refill_seconds).
   */
  create(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<SandboxRecord> {
    const start = performance.now();
    const counted = input.background !== true;
    return inSpan("sandboxes.create", "sandboxes", { "space.template": input.template }, async (span) => {
      try {
        const { rec, path } = await this.#create(tenantId, input, signal);
        if (counted) this.#r.metrics.createSeconds.observe({ path }, secondsSince(start));
        span.setAttributes({ "space.sandbox.id": rec.id, "space.create.path": path });
        return rec;
      } catch (e: unknown) {
        if (counted) this.#r.metrics.createFailures.inc({ reason: SpaceError.from(e).code });
        throw e;
      }
    });
  }

  async #create(tenantId: TenantId, input: CreateInput, signal: AbortSignal): Promise<{ rec: SandboxRecord; path: CreatePath }> {
    const mounts = input.volumeMounts ?? [];
    if (mounts.length) {
      if (!this.#r.volumes) throw unimplemented("volumes need the store-backed sandbox service");
      validateVolumeMounts(mounts);
      if (input.template.startsWith("sn_")) throw invalid("volume mounts on a create from a snapshot are not supported; create from a template", { field: "volumeMounts" });
    }
    const restored = (rec: SandboxRecord) => ({ rec, path: "restore" as const });
    const fromSnapshot = !input.resolvedTemplate && input.template.startsWith("sn_") ? await this.#r.snapshots.findNamed(tenantId, input.template) : null;
    if (fromSnapshot) return restored(await this.#forks.createFromSnapshot(tenantId, fromSnapshot, input));
    const plan = await inChildSpan("sandboxes.plan", "sandboxes", {}, () => this.#plan(tenantId, input));
    if (!plan) {
      // E2B: `Sandbox.create(snapshotName)` starts from a named snapshot too.
      const named = input.resolvedTemplate ? null : await this.#r.snapshots.findNamed(tenantId, input.template);
      if (named) return restored(await this.#forks.createFromSnapshot(tenantId, named, input));
      throw notFound(`template '${input.template}' not found`);
    }
    const { template, vcpu, memoryMib, diskMib, placement } = plan;
    if (this.#warm && input.adopt !== false && !mounts.length && (input.id !== undefined || (await this.#warm.hasPools()))) {
      // A ready member personalised in place; none (or any doubt) → the cold path below.
      const adopted = await inChildSpan("sandboxes.adopt", "sandboxes", {}, () => this.#warm!.adopt(tenantId, { template, vcpu, memoryMib, diskMib, placement, input }, signal));
      if (adopted) {
        // The hand-over rewrote the row (tenant, tokens) outside this repo: publish it as the repo does.
        this.#r.events.emit("started", adopted);
        return { rec: adopted, path: "warm" };
      }
    }

    const now = this.#r.now();
    const id = input.id ?? newSandboxId();
    const secure = input.secure;
    const executionId = newExecutionId();
    const rec = await inChildSpan("sandboxes.insert", "sandboxes", { "space.sandbox.id": id }, () => this.#r.repo.insert(
      {
        id,
        tenantId,
        templateId: template.templateId,
        alias: template.alias,
        state: "creating",
        vcpu,
        memoryMib,
        diskMib,
        metadata: input.metadata,
        envVars: input.envVars,
        envdAccessToken: secure ? token() : null,
        trafficAccessToken: secure || input.network?.allowPublicTraffic === false ? token() : null,
        secure,
        allowInternetAccess: input.allowInternetAccess,
        network: input.network ?? {},
        lifecycle: { onTimeout: input.onTimeout, autoResume: input.autoResume, ...(input.pauseKind ? { pauseKind: input.pauseKind } : {}) },
        startedAt: now,
        endAt: new Date(now.getTime() + input.timeoutSec * 1000),
      },
      executionId,
    ));

    let ref: SandboxRef | null = null;
    try {
      const attached = mounts.length ? await this.#r.volumes!.attach(tenantId, id, mounts) : [];
      const pin = attached.length ? this.#r.volumes!.pinOf(attached) : undefined;
      const environment = this.#r.templates.binding ? await this.#r.templates.binding(template.templateId) : undefined;
      ref = await inChildSpan("sandboxes.place", "sandboxes", { "space.sandbox.id": id }, () => this.#place(
        input.waitForCapacity === true,
        {
          sandboxId: id,
          templateId: template.templateId,
          vcpu,
          memoryMib,
          diskMib,
          ...(placement.nodeGroup !== undefined ? { nodeGroup: placement.nodeGroup } : {}),
          ...(placement.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
          ...(environment ? { environment } : {}),
          // A sandbox runs where its volumes are.
          ...(pin ? { pinnedNodeId: pin } : {}),
        },
        signal,
      ));
      if (!ref.recorded) await this.#r.repo.update(id, { nodeId: ref.nodeId as NodeId });
      const volumes = attached.length ? await this.#r.volumes!.settle(attached, ref.nodeId) : [];
      const spec: SandboxSpec = {
        sandboxId: id,
        executionId,
        template: template.templateId,
        vcpu,
        memoryMib,
        diskMib,
        envVars: input.envVars,
        ...(rec.envdAccessToken ? { accessToken: rec.envdAccessToken } : {}),
        allowInternetAccess: effectiveInternetAccess(rec),
        network: egressPolicyOf(rec.allowInternetAccess, rec.network),
        ...(input.background ? { background: true } : {}),
        ...(volumes.length ? { volumes } : {}),
      };
      const status = await this.#r.substrate.start(ref, spec, signal);
      // The timeout counts from when the sandbox is usable, like E2B's.
      const startedAt = this.#r.now();
      const running = await inChildSpan("sandboxes.running", "sandboxes", { "space.sandbox.id": id }, () =>
        this.#r.repo.transition(id, ["creating"], "running", {
          nodeId: ref!.nodeId as NodeId,
          address: status.address,
          startedAt,
          endAt: new Date(startedAt.getTime() + input.timeoutSec * 1000),
        }),
      );
      if (!running) {
        // Killed while it was being created: the kill found nothing on the node yet.
        await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch((e: unknown) =>
          this.#r.log.warn({ err: e, sandboxId: id }, "kill after a create lost to a kill failed"),
        );
        throw notFound(`sandbox ${id} was killed while it was being created`);
      }
      return { rec: running, path: "cold" };
    } catch (e: unknown) {
      const err = SpaceError.from(e);
      // No room (which resource is in the message) is an answer, not a fault: one line, no stack.
      if (err.code === "resource_exhausted") this.#r.log.warn({ sandboxId: id, code: err.code, reason: err.message }, "sandbox create refused: no capacity");
      else this.#r.log.warn({ sandboxId: id, code: err.code, err: e }, "sandbox create failed");
      if (ref) {
        await this.#r.substrate.kill(ref, AbortSignal.timeout(30_000)).catch((k: unknown) =>
          this.#r.log.error({ err: k, sandboxId: id }, "cleanup after a failed create could not kill; the node reaper will"),
        );
      }
      await this.#r.repo.transition(id, ["creating"], "failed", { failureMessage: `${err.code}: ${publicMessage(err)}` });
      this.#r.events.emit("ended", id);
      throw err;
    }
  }

  /**
   * Places the create; with `wait`, a refusal for capacity (no node has room: not a quota,
   * not a rate limit) is retried with backoff, up to 1 s apart, until `signal` aborts. The
   * row waits `creating` on no node, so it holds nothing on any node meanwhile; each retry
   * is one placement decision against the store's reservations, so room freed by a kill is
   * taken at the next retry.
   */
  async #place(wait: boolean, req: PlacementRequest, signal: AbortSignal): Promise<SandboxRef> {
    for (let delayMs = 50; ; delayMs = Math.min(delayMs * 2, 1000)) {
      try {
        return await this.#r.substrate.place(req, signal);
      } catch (e: unknown) {
        const err = SpaceError.from(e);
        if (!wait || err.code !== "resource_exhausted" || err.detail !== undefined || signal.aborted) throw e;
        this.#r.log.debug({ sandboxId: req.sandboxId, reason: err.message, delayMs }, "create waits for capacity");
        try {
          await sleep(delayMs, undefined, { signal });
        } catch {
          throw new SpaceError("deadline_exceeded", `no node had room before the create's deadline: ${err.message}`);
        }
      }
    }
  }

  /**
   * Releases what an interrupted create left (its creator died): the node's half-made
   * sandbox is killed (best effort) and the row fails, so the create can run again anew.
   */
  async abandon(rec: SandboxRecord, reason: string, signal: AbortSignal): Promise<void> {
    if (rec.nodeId) await this.#r.substrate.kill({ sandboxId: rec.id, nodeId: rec.nodeId }, signal).catch(() => {});
    await this.#r.repo.transition(rec.id, ["creating"], "failed", { failureMessage: reason });
  }
}

const token = () => randomBytes(24).toString("base64url");
