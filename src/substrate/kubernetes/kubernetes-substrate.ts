/**
 * Kubernetes substrate: a sandbox is a Pod (./pod.ts) that kube-scheduler places on one
 * of the virtual nodes SPACE node agents register (src/node/kubelet). The node agent
 * plays kubelet: it runs the sandbox and reports the pod's IP and readiness.
 *
 *   place  = create the Pod, wait (watch) until the scheduler binds it → the node's id
 *   start  = hand the node the SandboxSpec (a Secret owned by the pod, named by a pod
 *            annotation: the envd token never sits on the pod), wait (watch) for the pod's
 *            IP and Ready while watching its FailedCreatePodSandBox events (./wait.ts)
 *   kill   = the node kills the sandbox; the pod is deleted (absent = ok)
 *   others = node-api of the pod's node (its URL is a Node annotation), as on Direct
 *
 * The failure arm of place/start deletes the pod once; the sandbox service then retires
 * the execution (marks the create failed).
 */
import { NodeApiSubstrate } from "../node-api-substrate.ts";
import { SpaceError, notFound, unimplemented } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { SandboxSpec, SandboxStatus } from "../../contract/node-api.ts";
import { environmentLabel } from "../../contract/execution-environment.ts";
import { NodeClient } from "../node-client.ts";
import type { GateObservation } from "../placement.ts";
import { placementWork, type GateMode, type GatePlacement } from "../placement.ts";
import type { PlacementRequest, SandboxRef, SnapshotDescriptor, SnapshotOptions, Substrate } from "../substrate.ts";
import { errorCodeOfMarker, isConflict, isNotFound, KubeError, type KubeApi } from "../../kube/kube-api.ts";
import {
  EXECUTION_LABEL,
  NODE_API_ANNOTATION,
  POD_MANAGED_BY,
  RESTORE_SECRET_KEY,
  SANDBOX_LABEL,
  SPEC_SECRET_ANNOTATION,
  SPEC_SECRET_KEY,
  SPEC_SECRET_TYPE,
  parseRefusalMarker,
  podNameOf,
  toLabelValue,
} from "../../kube/names.ts";
import { renderPod } from "./pod.ts";
import { waitForPod } from "./wait.ts";
import type { PodObject } from "../../kube/objects.ts";

export interface KubernetesSubstrateDeps {
  kube: KubeApi;
  /** SPACE_KUBE_NAMESPACE: where sandbox pods live. */
  namespace: string;
  internalToken: string;
  gate?: GateMode;
  /** SPACE_PLACEMENT_NODE_SELECTOR: node labels every sandbox requires. */
  selectorExtras?: Record<string, string>;
  onGate?: (o: GateObservation) => void;
  /** How long a pod may take to be scheduled, and then to be ready (about 120 s each). */
  scheduleDeadlineMs?: number;
  readinessDeadlineMs?: number;
  /** Watch re-open delay (1 s). */
  reopenMs?: number;
  log: Logger;
}

interface NodeObject {
  metadata?: { name?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
}

export class KubernetesSubstrate extends NodeApiSubstrate implements Substrate {
  readonly #d: Required<Omit<KubernetesSubstrateDeps, "onGate" | "selectorExtras">> & Pick<KubernetesSubstrateDeps, "onGate"> & { selectorExtras: Record<string, string> };
  /** sandbox id → its pod's uid (between place and start). */
  readonly #uids = new Map<string, string>();
  readonly #clients = new Map<string, { client: NodeClient; at: number }>();
  #eventsRefusedWarned = false;

  constructor(deps: KubernetesSubstrateDeps) {
    super();
    this.#d = {
      gate: "off",
      scheduleDeadlineMs: 120_000,
      readinessDeadlineMs: 120_000,
      reopenMs: 1000,
      ...deps,
      selectorExtras: deps.selectorExtras ?? {},
    };
  }

  get gate(): GateMode {
    return this.#d.gate;
  }

  /** Volumes are placed by SPACE on Direct nodes; kube-scheduler has no notion of them yet. */
  async placeVolume(): Promise<string> {
    throw unimplemented("volumes need the direct substrate (SPACE_SUBSTRATE=direct)");
  }

  async place(req: PlacementRequest, signal: AbortSignal): Promise<SandboxRef> {
    const { kube, namespace, gate } = this.#d;
    const env = req.environment;
    let shortlist: string[] | undefined;
    if (req.pinnedNodeId !== undefined) {
      shortlist = [req.pinnedNodeId];
      const node = await this.#node(req.pinnedNodeId, signal);
      // A pinned restore whose node does not publish the environment: 409 before any pod.
      if (node && gate === "on" && env?.kind === "bound" && node.metadata?.labels?.[environmentLabel(env.environment)] !== "usable") {
        throw new SpaceError(
          "failed_precondition",
          `sandbox ${req.sandboxId} is pinned to node ${req.pinnedNodeId}, which does not publish environment ${env.environment}; ` +
            `drain the node (POST /admin/api/v1/nodes/${req.pinnedNodeId}/drain) so the snapshot is published to remote storage and restores elsewhere`,
        );
      }
    }
    const { pod, warnings } = renderPod(
      {
        namespace,
        sandboxId: req.sandboxId,
        ...placementWork(req, this.#d.selectorExtras),
        ...(shortlist ? { shortlist } : {}),
      },
      gate,
    );
    for (const w of warnings) this.#d.log.warn({ sandboxId: req.sandboxId }, w);
    const created = await this.#createPod(pod, signal);
    const uid = created.metadata?.uid ?? "";
    this.#uids.set(req.sandboxId, uid);
    try {
      const nodeName = await waitForPod({
        kube,
        namespace,
        podName: pod.metadata.name,
        podUid: uid,
        until: (p) => p.spec?.nodeName || undefined,
        describe: (p) => {
          const c = p.status?.conditions?.find((x) => x.type === "PodScheduled" && x.status === "False");
          return c ? `kube-scheduler: ${c.reason ?? ""} ${c.message ?? ""}`.trim() : undefined;
        },
        deadlineMs: this.#d.scheduleDeadlineMs,
        what: "a node (kube-scheduler)",
        reopenMs: this.#d.reopenMs,
        log: this.#d.log,
        onEventsRefused: (e) => this.#warnEventsRefused(e),
        signal,
      });
      if (gate !== "off") this.#observeGate(req, nodeName, signal);
      return { sandboxId: req.sandboxId, nodeId: nodeName };
    } catch (e) {
      await this.#deletePod(req.sandboxId, uid);
      throw e;
    }
  }

  start(ref: SandboxRef, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    return this.#run(ref, spec, undefined, signal);
  }

  /** The node restores `snapshot` for the pod `place` created (in the Secret beside the spec). */
  restore(ref: SandboxRef, snapshot: SnapshotDescriptor, spec: SandboxSpec, signal: AbortSignal): Promise<SandboxStatus> {
    return this.#run(ref, spec, snapshot, signal);
  }

  /** Suspend on the node (memory + disk), then the pod goes: the sandbox left its node. */
  override async suspend(ref: SandboxRef, opts: SnapshotOptions, signal: AbortSignal): Promise<SnapshotDescriptor> {
    const d = await super.suspend(ref, opts, signal);
    await this.#deletePod(ref.sandboxId, undefined, signal);
    return d;
  }

  async #run(ref: SandboxRef, spec: SandboxSpec, snapshot: SnapshotDescriptor | undefined, signal: AbortSignal): Promise<SandboxStatus> {
    const { kube, namespace } = this.#d;
    const name = podNameOf(ref.sandboxId);
    const uid = this.#uids.get(ref.sandboxId);
    this.#uids.delete(ref.sandboxId);
    const podPath = `/api/v1/namespaces/${enc(namespace)}/pods/${enc(name)}`;
    try {
      // The spec (envd token, env vars) and a restore's descriptor go in a Secret owned by
      // the pod (garbage-collected with it; also deleted with it here); the pod names it.
      const ownerUid = uid ?? (await kube.request<PodObject>("GET", podPath, { signal })).metadata?.uid;
      if (!ownerUid) throw new SpaceError("unavailable", `pod ${namespace}/${name} has no uid`);
      await this.#putSpecSecret(name, ownerUid, spec, snapshot, signal);
      // The node runs the pod once it names its Secret (the scheduler has bound it already).
      const patched = await kube.request<PodObject>("PATCH", podPath, {
        body: {
          metadata: {
            uid: ownerUid,
            labels: { [EXECUTION_LABEL]: toLabelValue(spec.executionId) },
            annotations: { [SPEC_SECRET_ANNOTATION]: name },
          },
        },
        patch: "merge",
        signal,
      });
      const podUid = patched.metadata?.uid ?? uid ?? "";
      await waitForPod({
        kube,
        namespace,
        podName: name,
        podUid,
        until: podReady,
        deadlineMs: this.#d.readinessDeadlineMs,
        what: "its IP and readiness",
        reopenMs: this.#d.reopenMs,
        log: this.#d.log,
        onEventsRefused: (e) => this.#warnEventsRefused(e),
        signal,
      });
      const client = await this.client(ref.nodeId, signal);
      return await client.getSandbox(ref.sandboxId, signal);
    } catch (e) {
      await this.#deletePod(ref.sandboxId, uid);
      throw e;
    }
  }

  async kill(ref: SandboxRef, signal: AbortSignal): Promise<void> {
    try {
      await (await this.client(ref.nodeId, signal)).killSandbox(ref.sandboxId, signal);
    } catch (e) {
      // A node that is gone holds nothing to kill; the pod still goes.
      if (!(e instanceof SpaceError && e.code === "not_found")) throw e;
    }
    await this.#deletePod(ref.sandboxId, undefined, signal);
  }

  async #createPod(pod: ReturnType<typeof renderPod>["pod"], signal: AbortSignal): Promise<PodObject> {
    const path = `/api/v1/namespaces/${enc(pod.metadata.namespace)}/pods`;
    try {
      return await this.#d.kube.request<PodObject>("POST", path, { body: pod, signal });
    } catch (e) {
      if (!(e instanceof KubeError && e.status === 409)) throw toSpaceError(e, `create pod ${pod.metadata.name}`);
      // A pod left by an earlier execution of this sandbox: it is being retired; replace it.
      await this.#deletePod(pod.metadata.name.replace(/^sbx-/, ""), undefined, signal, pod.metadata.name);
      return await this.#d.kube.request<PodObject>("POST", path, { body: pod, signal }).catch((e2: unknown) => {
        throw toSpaceError(e2, `create pod ${pod.metadata.name}`);
      });
    }
  }

  /** The pod's spec Secret (created, or replaced when an earlier execution left one), owned by the pod. */
  async #putSpecSecret(name: string, podUid: string, spec: SandboxSpec, snapshot: SnapshotDescriptor | undefined, signal: AbortSignal): Promise<void> {
    const path = `/api/v1/namespaces/${enc(this.#d.namespace)}/secrets`;
    const body = {
      apiVersion: "v1",
      kind: "Secret",
      type: SPEC_SECRET_TYPE,
      metadata: {
        name,
        namespace: this.#d.namespace,
        labels: { ...POD_MANAGED_BY, [SANDBOX_LABEL]: toLabelValue(spec.sandboxId) },
        ownerReferences: [{ apiVersion: "v1", kind: "Pod", name, uid: podUid }],
      },
      stringData: {
        [SPEC_SECRET_KEY]: JSON.stringify(spec),
        ...(snapshot ? { [RESTORE_SECRET_KEY]: JSON.stringify(snapshot) } : {}),
      },
    };
    try {
      await this.#d.kube.request("POST", path, { body, signal });
    } catch (e) {
      if (!isConflict(e)) throw toSpaceError(e, `create secret ${name}`);
      await this.#d.kube.request("PUT", `${path}/${enc(name)}`, { body, signal }).catch((e2: unknown) => {
        throw toSpaceError(e2, `replace secret ${name}`);
      });
    }
  }

  /**
   * Deletes the sandbox's pod now (grace 0: the node already killed or never ran it) and
   * then its spec Secret. Absent = ok; another pod of that name (uid mismatch) is left alone.
   */
  async #deletePod(sandboxId: string, uid: string | undefined, signal?: AbortSignal, name = podNameOf(sandboxId)): Promise<void> {
    const ns = enc(this.#d.namespace);
    const opts = (preconditions?: { uid: string }) => ({
      body: { kind: "DeleteOptions", apiVersion: "v1", gracePeriodSeconds: 0, ...(preconditions ? { preconditions } : {}) },
      signal: signal ?? AbortSignal.timeout(30_000),
    });
    try {
      await this.#d.kube.request("DELETE", `/api/v1/namespaces/${ns}/pods/${enc(name)}`, opts(uid ? { uid } : undefined));
    } catch (e) {
      if (isConflict(e)) return; // already another pod: its Secret is its own
      if (!isNotFound(e)) {
        this.#d.log.warn({ sandboxId, err: e }, "deleting the sandbox pod failed");
        return;
      }
    }
    try {
      await this.#d.kube.request("DELETE", `/api/v1/namespaces/${ns}/secrets/${enc(name)}`, opts());
    } catch (e) {
      if (!isNotFound(e)) this.#d.log.warn({ sandboxId, err: e }, "deleting the sandbox pod's secret failed");
    }
  }

  async #node(name: string, signal: AbortSignal): Promise<NodeObject | null> {
    try {
      return await this.#d.kube.request<NodeObject>("GET", `/api/v1/nodes/${enc(name)}`, { signal });
    } catch (e) {
      if (isNotFound(e)) return null;
      throw toSpaceError(e, `get node ${name}`);
    }
  }

  #observeGate(req: PlacementRequest, nodeName: string, signal: AbortSignal): void {
    const env = req.environment;
    void this.#node(nodeName, signal)
      .then((n) => {
        const placement: GatePlacement =
          env?.kind !== "bound" ? "no_evidence" : n?.metadata?.labels?.[environmentLabel(env.environment)] === "usable" ? "admitted" : "environment_not_usable";
        this.#d.onGate?.({ sandboxId: req.sandboxId, gate: this.#d.gate, nodeId: nodeName, placement });
      })
      .catch(() => {});
  }

  #warnEventsRefused(e: { message: string; status?: number | undefined }): void {
    if (this.#eventsRefusedWarned) return;
    this.#eventsRefusedWarned = true;
    this.#d.log.warn(
      { status: e.status, err: e.message, namespace: this.#d.namespace },
      "the apiserver refuses watching events in the sandbox namespace; node refusals now surface only at the readiness deadline (grant watch on events)",
    );
  }

  protected async client(nodeId: string, signal: AbortSignal): Promise<NodeClient> {
    const cached = this.#clients.get(nodeId);
    if (cached && Date.now() - cached.at < 5_000) return cached.client;
    const node = await this.#node(nodeId, signal);
    const url = node?.metadata?.annotations?.[NODE_API_ANNOTATION];
    if (!url) throw notFound(`node ${nodeId} is not registered (no Node with a ${NODE_API_ANNOTATION} annotation)`);
    const client = new NodeClient({ baseUrl: url, internalToken: this.#d.internalToken });
    this.#clients.set(nodeId, { client, at: Date.now() });
    return client;
  }
}

/**
 * Ready: an IP and the Ready condition. A Failed pod fails the wait with its message, under
 * the code its `[space-err=<Code>]` marker names (the node fails the pod right after
 * recording the refusal event; either may reach the control plane first), else unavailable.
 */
export function podReady(p: PodObject): true | undefined {
  if (p.status?.phase === "Failed") {
    const message = p.status.message ?? p.status.reason ?? "no reason given";
    const marker = parseRefusalMarker(message);
    const code = (marker && errorCodeOfMarker(marker)) || "unavailable";
    throw new SpaceError(code, `pod ${p.metadata?.name} failed: ${message.replace(/\s*\[space-err=[A-Za-z]+\]\s*/, " ").trim()}`);
  }
  const ready = p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
  return p.status?.podIP && ready ? true : undefined;
}

function toSpaceError(e: unknown, what: string): SpaceError {
  if (e instanceof KubeError) {
    const code = e.status === 403 || e.status === 401 ? "permission_denied" : e.status === 422 || e.status === 400 ? "invalid_argument" : "unavailable";
    return new SpaceError(code, `${what}: ${e.message}`, { cause: e });
  }
  return SpaceError.from(e);
}

const enc = encodeURIComponent;
