/**
 * What a running sandbox's node reports (metrics, the network record) and its egress
 * policy: validated, stored with the sandbox (every re-creation applies it) and applied
 * live by the node.
 */
import { notFound } from "../core/errors.ts";
import type { TenantId } from "../core/ids.ts";
import type { NetworkRecord, SandboxMetrics } from "../contract/node-api.ts";
import { egressPolicyOf } from "./egress-rules.ts";
import { effectiveInternetAccess } from "./create-input.ts";
import type { NetworkPolicy, SandboxRecord } from "./model.ts";
import { liveSandbox, type SandboxResources } from "./resources.ts";

export class SandboxNetwork {
  readonly #r: SandboxResources;

  constructor(r: SandboxResources) {
    this.#r = r;
  }

  /** Samples from the node; only the current one (no history kept yet). */
  async metrics(tenantId: TenantId, id: string, range: { start?: Date; end?: Date }): Promise<SandboxMetrics[]> {
    const rec = await liveSandbox(this.#r, tenantId, id);
    if (rec.state !== "running" || !rec.nodeId) return [];
    const now = this.#r.now();
    if (range.end && range.end.getTime() < now.getTime() - 5_000) return [];
    if (range.start && range.start.getTime() > now.getTime() + 5_000) return [];
    return [await this.#r.substrate.metrics({ sandboxId: rec.id, nodeId: rec.nodeId }, AbortSignal.timeout(10_000))];
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
