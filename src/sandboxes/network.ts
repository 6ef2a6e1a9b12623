/**
 * What a sandbox's node reports (metrics history, logs, the network record) and its egress
 * policy: validated, stored with the sandbox (every re-creation applies it) and applied
 * live by the node. Metrics and logs come from the node the sandbox ran on last, which
 * keeps them a while after it left (sandbox-telemetry.ts on the node).
 */
import { notFound, SpaceError } from "../core/errors.ts";
import type { SandboxId, TenantId } from "../core/ids.ts";
import type { NetworkRecord, SandboxMetrics } from "../contract/node-api.ts";
import type { SandboxLogEntry } from "../contract/envd-logs.ts";
import type { LogQuery } from "../contract/sandbox-logs.ts";
import { egressPolicyOf } from "./egress-rules.ts";
import { effectiveInternetAccess } from "./create-input.ts";
import type { NetworkPolicy, SandboxRecord } from "./model.ts";
import { liveSandbox, type SandboxResources } from "./resources.ts";

export class SandboxNetwork {
  readonly #r: SandboxResources;

  constructor(r: SandboxResources) {
    this.#r = r;
  }

  /** The samples its node took in the range (both ends inclusive; open = from its start, up to now). */
  async metrics(tenantId: TenantId, id: string, range: { start?: Date; end?: Date }): Promise<SandboxMetrics[]> {
    const rec = await liveSandbox(this.#r, tenantId, id);
    if (!rec.nodeId) return [];
    const ref = { sandboxId: rec.id, nodeId: rec.nodeId };
    return orNone(this.#r.substrate.metricsHistory(ref, { startMs: range.start?.getTime(), endMs: range.end?.getTime() }, AbortSignal.timeout(10_000)));
  }

  /** Its log entries the query selects; a killed sandbox's too, while its node keeps them. */
  async logs(tenantId: TenantId, id: string, q: LogQuery): Promise<SandboxLogEntry[]> {
    const rec = await this.#r.repo.get(tenantId, id as SandboxId);
    if (!rec) throw notFound(`sandbox ${id} not found`);
    if (!rec.nodeId) return [];
    return orNone(this.#r.substrate.logs({ sandboxId: rec.id, nodeId: rec.nodeId }, q, AbortSignal.timeout(10_000)));
  }

  /**
   * The sandbox's network record: destinations observed (policy mode `observe`) and refused
   * by its policy, as its node recorded them (empty unless it runs).
   */
  async networkRecord(tenantId: TenantId, id: string): Promise<NetworkRecord> {
    const rec = await liveSandbox(this.#r, tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) return { observed: [], denied: [] };
    return this.#r.substrate.networkRecord({ sandboxId: rec.id, nodeId: rec.nodeId }, AbortSignal.timeout(10_000));
  }

  /**
   * Replaces the whole egress policy: validated (400), stored with the sandbox (so every
   * re-creation applies it), and applied by the node to a running sandbox.
   */
  async updateNetwork(tenantId: TenantId, id: string, network: NetworkPolicy, allowInternetAccess: boolean | undefined): Promise<SandboxRecord> {
    const rec = await liveSandbox(this.#r, tenantId, id);
    const merged: NetworkPolicy = { ...network };
    // Public-traffic settings are create-time properties; an egress update keeps them.
    if (rec.network?.allowPublicTraffic !== undefined) merged.allowPublicTraffic = rec.network.allowPublicTraffic;
    if (rec.network?.maskRequestHost !== undefined) merged.maskRequestHost = rec.network.maskRequestHost;
    egressPolicyOf(allowInternetAccess ?? rec.allowInternetAccess, merged);
    const updated = await this.#r.repo.update(rec.id, {
      network: merged,
      ...(allowInternetAccess === undefined ? {} : { allowInternetAccess }),
    });
    if (!updated) throw notFound(`sandbox ${id} not found`);
    if (updated.nodeId && updated.state === "running") {
      // The node enforces the compiled policy (nft and its resolver); the flag is its fallback.
      await this.#r.substrate.setEgress(
        { sandboxId: updated.id, nodeId: updated.nodeId },
        { allowInternetAccess: effectiveInternetAccess(updated), policy: egressPolicyOf(updated.allowInternetAccess, updated.network) },
        AbortSignal.timeout(30_000),
      );
    }
    return updated;
  }

}

/** A node that is gone (or no longer knows the sandbox) has nothing to report. */
async function orNone<T>(p: Promise<T[]>): Promise<T[]> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof SpaceError && e.code === "not_found") return [];
    throw e;
  }
}
