/**
 * The node agent as kubelet of its own virtual Node (the virtual-kubelet pattern).
 *
 *   register  Node by server-side apply (labels incl. env labels, node-api annotation,
 *             taint) under node-ctl's field manager; status (capacity, allocatable,
 *             conditions, addresses); a Lease in kube-node-lease renewed every ~10 s
 *   labels    re-applied with every inventory: labels it stops sending disappear, an
 *             inventory that cannot be read changes nothing
 *   pods      a watch on pods bound to this node (from RV "0", re-opened a second after
 *             it ends): a pod naming its spec Secret (owned by the pod; it holds the
 *             envd token) is run with the agent's manager (or restored from the
 *             snapshot descriptor in that Secret); its status gets phase Running,
 *             podIP = the sandbox's address and Ready. A refusal becomes a
 *             `FailedCreatePodSandBox` Event with `[space-err=<Code>]`; retryable codes
 *             are retried with backoff as kubelet does, others fail the pod.
 *   deletes   a deleted (or deleting) pod's sandbox is killed; a deleting pod is then
 *             removed with grace 0.
 */
import { randomBytes } from "node:crypto";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { ZodError } from "zod";
import { SandboxSpec as SandboxSpecSchema, type SandboxSpec, type SandboxStatus } from "../../contract/node-api.ts";
import { SnapshotDescriptor as SnapshotDescriptorSchema, type SnapshotDescriptor } from "../../contract/snapshot-descriptor.ts";
import type { NodeAgent } from "../agent.ts";
import type { KubeApi, WatchEvent } from "../../kube/kube-api.ts";
import { isNotFound, markerCodeOf } from "../../kube/kube-api.ts";
import {
  KUBELET_COMPONENT,
  NODE_CTL_FIELD_MANAGER,
  REFUSAL_REASON,
  RESTORE_SECRET_KEY,
  SANDBOX_ID_ANNOTATION,
  SPEC_SECRET_ANNOTATION,
  SPEC_SECRET_KEY,
  refusalMarker,
} from "../../kube/names.ts";
import type { PodObject } from "../../kube/objects.ts";
import { nodeApply, nodeStatus, type NodeIdentity } from "./node-object.ts";

export interface VirtualKubeletDeps {
  kube: KubeApi;
  agent: Pick<NodeAgent, "inventory" | "manager" | "snapshots" | "templates">;
  identity: NodeIdentity;
  /** The host address published as the Node's InternalIP. */
  address: string;
  version: string;
  /** Node status + labels interval (default 10 s); the Lease renews on the same beat. */
  heartbeatMs?: number;
  reopenMs?: number;
  /** Retries of a retryable refusal before the pod fails (default 3). */
  maxRetries?: number;
  log: Logger;
}

const LEASE_NS = "kube-node-lease";
const retryable = new Set(["unavailable", "resource_exhausted", "aborted", "deadline_exceeded"]);

export class VirtualKubelet {
  readonly #d: VirtualKubeletDeps;
  readonly #stop = new AbortController();
  /** pod uid → its run (in progress or done). */
  readonly #runs = new Map<string, Promise<void>>();
  /** pod uid → sandbox id (for deletes). */
  readonly #sandboxOf = new Map<string, string>();
  /** Template ids of the last inventory (re-sent with every apply: SSA drops what is not sent). */
  #templates: string[] = [];
  #beat: NodeJS.Timeout | undefined;
  #watching: Promise<void> | undefined;

  constructor(deps: VirtualKubeletDeps) {
    this.#d = deps;
  }

  get nodeName(): string {
    return this.#d.identity.name;
  }

  async start(): Promise<void> {
    await this.heartbeat();
    const every = this.#d.heartbeatMs ?? 10_000;
    const tick = () => {
      this.#beat = setTimeout(() => {
        void this.heartbeat()
          .catch((e: unknown) => this.#d.log.warn({ err: e }, "node heartbeat to the apiserver failed"))
          .finally(() => !this.#stop.signal.aborted && tick());
      }, every);
      this.#beat.unref();
    };
    tick();
    this.#watching = this.#watchPods();
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    clearTimeout(this.#beat);
    await this.#watching;
    await Promise.allSettled([...this.#runs.values()]);
  }

  /** Labels (SSA), status and Lease. An unreadable inventory changes no label. */
  async heartbeat(): Promise<void> {
    const { kube, identity } = this.#d;
    const signal = AbortSignal.any([this.#stop.signal, AbortSignal.timeout(30_000)]);
    let inv: Awaited<ReturnType<VirtualKubeletDeps["agent"]["inventory"]>> | undefined;
    try {
      inv = await this.#d.agent.inventory();
    } catch (e) {
      this.#d.log.warn({ err: e }, "inventory unavailable; node labels unchanged");
    }
    if (inv) {
      this.#templates = inv.templates.map((t) => t.templateId);
      await this.applyLabels(inv.usableEnvironments, signal);
    }
    if (inv) {
      const ready = this.#d.agent.manager !== undefined;
      await kube.request("PATCH", `/api/v1/nodes/${enc(identity.name)}/status`, {
        body: nodeStatus(inv, { address: this.#d.address, ready, message: ready ? "node agent running" : "node agent starting", now: new Date(), version: this.#d.version }),
        patch: "merge",
        signal,
      });
    }
    await this.#renewLease(signal);
  }

  /** Server-side apply of the Node's labels, annotation and taint under node-ctl's field manager. */
  async applyLabels(usableEnvironments: readonly string[], signal: AbortSignal): Promise<void> {
    await this.#d.kube.request("PATCH", `/api/v1/nodes/${enc(this.#d.identity.name)}`, {
      body: nodeApply(this.#d.identity, usableEnvironments, this.#templates),
      patch: "apply",
      query: { fieldManager: NODE_CTL_FIELD_MANAGER, force: "true" },
      signal,
    });
  }

  async #renewLease(signal: AbortSignal): Promise<void> {
    const name = this.#d.identity.name;
    await this.#d.kube.request("PATCH", `/apis/coordination.k8s.io/v1/namespaces/${LEASE_NS}/leases/${enc(name)}`, {
      body: {
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: { name, namespace: LEASE_NS },
        spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: new Date().toISOString().replace("Z", "000Z") },
      },
      patch: "apply",
      query: { fieldManager: NODE_CTL_FIELD_MANAGER, force: "true" },
      signal,
    });
  }

  async #watchPods(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        await this.#d.kube.watch<PodObject & { metadata?: { namespace?: string } }>(
          "/api/v1/pods",
          { fieldSelector: `spec.nodeName=${this.#d.identity.name}`, resourceVersion: "0" },
          (e) => this.#onPod(e),
          signal,
        );
      } catch (e) {
        this.#d.log.debug({ err: e }, "pod watch failed; re-opening");
      }
      await new Promise((r) => setTimeout(r, this.#d.reopenMs ?? 1000));
    }
  }

  #onPod(e: WatchEvent<PodObject & { metadata?: { namespace?: string } }>): void {
    const pod = e.object;
    const uid = pod.metadata?.uid;
    if (!uid || e.type === "BOOKMARK") return;
    const sandboxId = this.#sandboxOf.get(uid);
    if (e.type === "DELETED" || pod.metadata?.deletionTimestamp) {
      if (!this.#runs.has(`del:${uid}`)) {
        const done = this.#retire(pod, sandboxId, e.type !== "DELETED").finally(() => this.#runs.delete(`del:${uid}`));
        this.#runs.set(`del:${uid}`, done);
      }
      return;
    }
    const secretName = pod.metadata?.annotations?.[SPEC_SECRET_ANNOTATION];
    if (!secretName || this.#runs.has(uid)) return;
    this.#runs.set(uid, this.#run(pod, secretName));
  }

  /**
   * The pod's spec (and restore descriptor) from the Secret it names. A Secret owned by
   * another pod is an earlier execution's, about to be replaced: unavailable (retried).
   */
  async #readSpec(pod: PodObject & { metadata?: { namespace?: string } }, secretName: string): Promise<{ spec: SandboxSpec; snapshot?: SnapshotDescriptor }> {
    const ns = pod.metadata?.namespace ?? "default";
    let secret: SecretObject;
    try {
      secret = await this.#d.kube.request<SecretObject>("GET", `/api/v1/namespaces/${enc(ns)}/secrets/${enc(secretName)}`, {
        signal: AbortSignal.any([this.#stop.signal, AbortSignal.timeout(30_000)]),
      });
    } catch (e) {
      throw new SpaceError("unavailable", `cannot read the pod's spec secret ${ns}/${secretName}: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (!secret.metadata?.ownerReferences?.some((o) => o.kind === "Pod" && o.uid === pod.metadata?.uid)) {
      throw new SpaceError("unavailable", `secret ${ns}/${secretName} is not owned by pod ${pod.metadata?.name} (${pod.metadata?.uid})`);
    }
    const field = (key: string) => {
      const b64 = secret.data?.[key];
      return b64 === undefined ? undefined : Buffer.from(b64, "base64").toString("utf8");
    };
    const specJson = field(SPEC_SECRET_KEY);
    const snapJson = field(RESTORE_SECRET_KEY);
    try {
      if (specJson === undefined) throw new Error(`no '${SPEC_SECRET_KEY}' key`);
      const spec = SandboxSpecSchema.parse(JSON.parse(specJson));
      return { spec, ...(snapJson !== undefined ? { snapshot: SnapshotDescriptorSchema.parse(JSON.parse(snapJson)) } : {}) };
    } catch (e) {
      // The message names what is wrong, never the values (the Secret holds the envd token).
      const why = e instanceof ZodError ? e.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") : e instanceof Error ? e.message : String(e);
      throw new SpaceError("invalid_argument", `secret ${ns}/${secretName} holds no valid sandbox spec: ${why}`);
    }
  }

  async #run(pod: PodObject & { metadata?: { namespace?: string } }, secretName: string): Promise<void> {
    const uid = pod.metadata!.uid!;
    const log = this.#d.log.child({ pod: pod.metadata?.name });
    const maxRetries = this.#d.maxRetries ?? 3;
    for (let attempt = 0; !this.#stop.signal.aborted; attempt++) {
      try {
        const { spec, snapshot } = await this.#readSpec(pod, secretName);
        this.#sandboxOf.set(uid, spec.sandboxId);
        const manager = this.#d.agent.manager;
        if (!manager) throw new SpaceError("unavailable", "the node agent is still starting");
        const existing = manager.list().find((s) => s.sandboxId === spec.sandboxId);
        const signal = AbortSignal.any([this.#stop.signal, AbortSignal.timeout(300_000)]);
        let st: SandboxStatus;
        if (existing) st = existing; // adopted after a restart, or already run
        else if (snapshot) {
          const snaps = this.#d.agent.snapshots;
          if (!snaps) throw new SpaceError("failed_precondition", "this node cannot restore memory snapshots (runc + CRIU only)");
          st = await snaps.restore(spec, snapshot, signal);
        } else st = (await this.#d.agent.templates?.restoreCaptured(spec, signal)) ?? (await manager.create(spec, signal));
        await this.#writeRunning(pod, st);
        log.info({ sandboxId: spec.sandboxId, address: st.address }, "pod running");
        return;
      } catch (e) {
        const err = SpaceError.from(e);
        const final = !retryable.has(err.code) || attempt >= maxRetries;
        await this.#refuse(pod, err, final).catch((x: unknown) => log.warn({ err: x }, "recording the refusal failed"));
        if (final) return;
        await new Promise((r) => setTimeout(r, 1000 * 2 ** attempt));
      }
    }
  }

  async #writeRunning(pod: PodObject & { metadata?: { namespace?: string } }, st: SandboxStatus): Promise<void> {
    const now = new Date().toISOString();
    const cond = (type: string) => ({ type, status: "True", lastTransitionTime: now });
    await this.#d.kube.request("PATCH", `${podPath(pod)}/status`, {
      body: {
        metadata: { uid: pod.metadata!.uid },
        status: {
          phase: "Running",
          podIP: st.address,
          podIPs: [{ ip: st.address }],
          hostIP: this.#d.address,
          startTime: now,
          conditions: [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
          containerStatuses: [
            { name: "sandbox", ready: true, started: true, restartCount: 0, image: "space.dev/sandbox", imageID: "", state: { running: { startedAt: now } } },
          ],
        },
      },
      patch: "merge",
    });
  }

  /** A `FailedCreatePodSandBox` Event with the marker; a final refusal also fails the pod. */
  async #refuse(pod: PodObject & { metadata?: { namespace?: string } }, err: SpaceError, final: boolean): Promise<void> {
    const ns = pod.metadata?.namespace ?? "default";
    const name = pod.metadata?.name ?? "";
    const now = new Date().toISOString();
    const message = `${err.message} ${refusalMarker(markerCodeOf(err.code))}`;
    await this.#d.kube.request("POST", `/api/v1/namespaces/${enc(ns)}/events`, {
      body: {
        apiVersion: "v1",
        kind: "Event",
        metadata: { name: `${name}.${randomBytes(8).toString("hex")}`, namespace: ns },
        involvedObject: { apiVersion: "v1", kind: "Pod", namespace: ns, name, uid: pod.metadata?.uid },
        reason: REFUSAL_REASON,
        message,
        type: "Warning",
        source: { component: KUBELET_COMPONENT, host: this.#d.identity.name },
        reportingComponent: KUBELET_COMPONENT,
        reportingInstance: this.#d.identity.name,
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      },
    });
    if (final) {
      await this.#d.kube.request("PATCH", `${podPath(pod)}/status`, {
        body: { metadata: { uid: pod.metadata?.uid }, status: { phase: "Failed", reason: REFUSAL_REASON, message } },
        patch: "merge",
      });
    }
  }

  /** The pod is going: kill its sandbox, then remove a deleting pod for good. */
  async #retire(pod: PodObject & { metadata?: { namespace?: string } }, sandboxId: string | undefined, finalize: boolean): Promise<void> {
    const uid = pod.metadata?.uid ?? "";
    await this.#runs.get(uid)?.catch(() => {});
    const id = sandboxId ?? pod.metadata?.annotations?.[SANDBOX_ID_ANNOTATION];
    const manager = this.#d.agent.manager;
    if (id && manager?.list().some((s) => s.sandboxId === id)) {
      await manager.kill(id, AbortSignal.timeout(60_000)).catch((e: unknown) => this.#d.log.warn({ sandboxId: id, err: e }, "kill for a deleted pod failed"));
    }
    this.#runs.delete(uid);
    this.#sandboxOf.delete(uid);
    if (finalize) {
      await this.#d.kube
        .request("DELETE", podPath(pod), { body: { kind: "DeleteOptions", apiVersion: "v1", gracePeriodSeconds: 0, preconditions: { uid } } })
        .catch((e: unknown) => {
          if (!isNotFound(e)) this.#d.log.warn({ err: e }, "removing a deleted pod failed");
        });
    }
  }
}

interface SecretObject {
  metadata?: { ownerReferences?: Array<{ kind?: string; uid?: string }> };
  data?: Record<string, string>;
}

const podPath = (pod: PodObject & { metadata?: { namespace?: string } }) =>
  `/api/v1/namespaces/${enc(pod.metadata?.namespace ?? "default")}/pods/${enc(pod.metadata?.name ?? "")}`;
const enc = encodeURIComponent;
