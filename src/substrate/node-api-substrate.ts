/**
 * The verbs every substrate forwards to the node that runs the sandbox (node-api): once
 * placed, a sandbox is driven the same way whether SPACE or kube-scheduler chose its
 * node, and a template build the same way whichever node the caller placed it on.
 * Substrates say how to reach a node (`client`) and own placement, start and kill.
 */
import type { MetricsRange, NetworkRecord, SandboxEgress, SandboxInit, SandboxMetrics, SandboxStatus } from "../contract/node-api.ts";
import type { SandboxLogEntry } from "../contract/envd-logs.ts";
import type { LogQuery } from "../contract/sandbox-logs.ts";
import { SpaceError } from "../core/errors.ts";
import type { NodeVolume, VolumeSent } from "../contract/volume-wire.ts";
import type { NodeClient } from "./node-client.ts";
import type { NodeBuildRequest, NodeBuildStatusWire, ProxyTarget, SandboxRef, SnapshotDescriptor, SnapshotOptions } from "./substrate.ts";

export abstract class NodeApiSubstrate {
  /** node-api of a node; not_found when the node is unknown. */
  protected abstract client(nodeId: string, signal: AbortSignal): Promise<NodeClient>;

  async suspend(ref: SandboxRef, opts: SnapshotOptions, signal: AbortSignal): Promise<SnapshotDescriptor> {
    return (await this.client(ref.nodeId, signal)).suspend(ref.sandboxId, opts, signal);
  }

  async capture(ref: SandboxRef, opts: SnapshotOptions, signal: AbortSignal): Promise<SnapshotDescriptor> {
    return (await this.client(ref.nodeId, signal)).capture(ref.sandboxId, opts, signal);
  }

  async publishSnapshot(nodeId: string, snapshotId: string, signal: AbortSignal): Promise<SnapshotDescriptor> {
    return (await this.client(nodeId, signal)).publishSnapshot(snapshotId, signal);
  }

  async dropSnapshot(nodeId: string, snapshotId: string, signal: AbortSignal): Promise<void> {
    try {
      await (await this.client(nodeId, signal)).dropSnapshot(snapshotId, signal);
    } catch (e) {
      if (e instanceof SpaceError && e.code === "not_found") return;
      throw e;
    }
  }

  async pause(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus> {
    return (await this.client(ref.nodeId, signal)).lifecycle(ref.sandboxId, "pause", signal);
  }

  async resume(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus> {
    return (await this.client(ref.nodeId, signal)).lifecycle(ref.sandboxId, "resume", signal);
  }

  async stop(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus> {
    return (await this.client(ref.nodeId, signal)).lifecycle(ref.sandboxId, "stop", signal);
  }

  async restart(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus> {
    return (await this.client(ref.nodeId, signal)).restart(ref.sandboxId, signal);
  }

  async init(ref: SandboxRef, body: SandboxInit, signal: AbortSignal): Promise<void> {
    await (await this.client(ref.nodeId, signal)).init(ref.sandboxId, body, signal);
  }

  async observe(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus | null> {
    try {
      return await (await this.client(ref.nodeId, signal)).getSandbox(ref.sandboxId, signal);
    } catch (e) {
      if (e instanceof SpaceError && e.code === "not_found") return null;
      throw e;
    }
  }

  async metrics(ref: SandboxRef, signal: AbortSignal): Promise<SandboxMetrics> {
    return (await this.client(ref.nodeId, signal)).metrics(ref.sandboxId, signal);
  }

  async metricsHistory(ref: SandboxRef, range: MetricsRange, signal: AbortSignal): Promise<SandboxMetrics[]> {
    return (await this.client(ref.nodeId, signal)).metricsHistory(ref.sandboxId, range, signal);
  }

  async logs(ref: SandboxRef, query: LogQuery, signal: AbortSignal): Promise<SandboxLogEntry[]> {
    return (await this.client(ref.nodeId, signal)).logs(ref.sandboxId, query, signal);
  }

  async networkRecord(ref: SandboxRef, signal: AbortSignal): Promise<NetworkRecord> {
    return (await this.client(ref.nodeId, signal)).networkRecord(ref.sandboxId, signal);
  }

  async setEgress(ref: SandboxRef, egress: SandboxEgress, signal: AbortSignal): Promise<void> {
    await (await this.client(ref.nodeId, signal)).egress(ref.sandboxId, egress, signal);
  }

  async proxyTarget(ref: SandboxRef, port: number, signal: AbortSignal): Promise<ProxyTarget> {
    const client = await this.client(ref.nodeId, signal);
    return { baseUrl: client.proxyUrl(ref.sandboxId, port), headers: client.proxyHeaders() };
  }

  async ensureVolume(nodeId: string, volumeId: string, sizeMib: number, signal: AbortSignal): Promise<NodeVolume> {
    return (await this.client(nodeId, signal)).ensureVolume(volumeId, sizeMib, signal);
  }

  async dropVolume(nodeId: string, volumeId: string, signal: AbortSignal): Promise<void> {
    try {
      await (await this.client(nodeId, signal)).deleteVolume(volumeId, signal);
    } catch (e) {
      if (e instanceof SpaceError && e.code === "not_found") return;
      throw e;
    }
  }

  async volumeTarget(nodeId: string, volumeId: string, signal: AbortSignal): Promise<ProxyTarget> {
    const client = await this.client(nodeId, signal);
    return { baseUrl: client.volumeUrl(volumeId), headers: client.authHeaders() };
  }

  async sendVolume(nodeId: string, volumeId: string, key: string, signal: AbortSignal): Promise<VolumeSent> {
    return (await this.client(nodeId, signal)).sendVolume(volumeId, key, signal);
  }

  async receiveVolume(nodeId: string, volumeId: string, sent: VolumeSent, signal: AbortSignal): Promise<NodeVolume> {
    return (await this.client(nodeId, signal)).receiveVolume(volumeId, sent, signal);
  }

  async startBuild(nodeId: string, req: NodeBuildRequest, signal: AbortSignal): Promise<void> {
    await (await this.client(nodeId, signal)).startBuild(req, signal);
  }

  async buildStatus(nodeId: string, buildId: string, logsOffset: number, signal: AbortSignal): Promise<NodeBuildStatusWire> {
    return (await this.client(nodeId, signal)).buildStatus(buildId, logsOffset, signal);
  }

  async pointTemplate(nodeId: string, alias: string, name: string, signal: AbortSignal): Promise<void> {
    await (await this.client(nodeId, signal)).pointTemplate(alias, name, signal);
  }

  async dropTemplate(nodeId: string, name: string, signal: AbortSignal): Promise<void> {
    await (await this.client(nodeId, signal)).dropTemplate(name, signal);
  }
}
