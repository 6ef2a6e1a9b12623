/**
 * A test double for Substrate: records calls, keeps sandboxes in memory, and can be told
 * to fail the next start with a given error. Not for production use.
 */
import { SpaceError } from "../core/errors.ts";
import type { SandboxEgress, SandboxMetrics, SandboxSpec, SandboxStatus } from "../node/api/contract.ts";
import type { PlacementRequest, ProxyTarget, SandboxRef, Substrate } from "./substrate.ts";

export class FakeSubstrate implements Substrate {
  readonly calls: string[] = [];
  readonly running = new Map<string, SandboxStatus>();
  failNextStart: SpaceError | null = null;
  /** Where proxyTarget points (a test HTTP server standing in for the node proxy). */
  proxyBase = "http://127.0.0.1:9";
  startDelayMs = 0;

  async place(req: PlacementRequest): Promise<SandboxRef> {
    this.calls.push(`place ${req.sandboxId}`);
    return { sandboxId: req.sandboxId, nodeId: "00000000-0000-4000-8000-000000000001" };
  }
  async start(ref: SandboxRef, spec: SandboxSpec): Promise<SandboxStatus> {
    this.calls.push(`start ${ref.sandboxId}`);
    if (this.startDelayMs) await new Promise((r) => setTimeout(r, this.startDelayMs));
    if (this.failNextStart) {
      const e = this.failNextStart;
      this.failNextStart = null;
      throw e;
    }
    const s: SandboxStatus = {
      sandboxId: spec.sandboxId,
      executionId: spec.executionId,
      template: spec.template,
      state: "running",
      address: "10.200.0.2",
      vcpu: spec.vcpu,
      memoryMib: spec.memoryMib,
      diskMib: spec.diskMib,
      startedAt: new Date().toISOString(),
    };
    this.running.set(ref.sandboxId, s);
    return s;
  }
  async #lifecycle(ref: SandboxRef, verb: string, state: SandboxStatus["state"]) {
    this.calls.push(`${verb} ${ref.sandboxId}`);
    const s = this.running.get(ref.sandboxId);
    if (!s) throw new SpaceError("not_found", `sandbox ${ref.sandboxId} not on node`);
    s.state = state;
    return s;
  }
  pause(ref: SandboxRef) {
    return this.#lifecycle(ref, "pause", "paused");
  }
  resume(ref: SandboxRef) {
    return this.#lifecycle(ref, "resume", "running");
  }
  stop(ref: SandboxRef) {
    return this.#lifecycle(ref, "stop", "stopped");
  }
  async kill(ref: SandboxRef): Promise<void> {
    this.calls.push(`kill ${ref.sandboxId}`);
    this.running.delete(ref.sandboxId);
  }
  async observe(ref: SandboxRef) {
    return this.running.get(ref.sandboxId) ?? null;
  }
  async metrics(ref: SandboxRef): Promise<SandboxMetrics> {
    if (!this.running.has(ref.sandboxId)) throw new SpaceError("not_found", "not on node");
    return { timestamp: new Date().toISOString(), cpuCount: 2, cpuUsedPct: 1.5, memUsed: 1e7, memTotal: 1e9, memCache: 0, diskUsed: 1e6, diskTotal: 1e9 };
  }
  readonly egress = new Map<string, boolean>();
  readonly policies = new Map<string, SandboxEgress["policy"]>();
  async setEgress(ref: SandboxRef, e: SandboxEgress): Promise<void> {
    this.policies.set(ref.sandboxId, e.policy);
    this.calls.push(`egress ${ref.sandboxId} ${e.allowInternetAccess}`);
    this.egress.set(ref.sandboxId, e.allowInternetAccess);
  }
  async proxyTarget(ref: SandboxRef, port: number): Promise<ProxyTarget> {
    return { baseUrl: new URL(`${this.proxyBase}/v1/sandboxes/${ref.sandboxId}/proxy/${port}`), headers: { "x-space-node-token": "internal" } };
  }
}
