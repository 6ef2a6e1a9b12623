/**
 * Leader election through a coordination.k8s.io/v1 Lease (the controller on this
 * substrate; client-go's leaderelection semantics): the holder renews `renewTime`; anyone
 * may take the Lease once `renewTime + leaseDurationSeconds` has passed, bumping
 * `leaseTransitions` (the epoch). Every write carries the resourceVersion it read, so of
 * two contenders only one wins (the other gets 409 and stays a follower). Release clears
 * the holder so a successor takes over at once.
 *
 * Expiry is judged by this process's clock against the holder's renewTime (as client-go
 * does with its observed time); hosts of one cluster are assumed NTP-synced.
 */
import type { LeaseBackend } from "../../store/leader.ts";
import { isConflict, isNotFound, type KubeApi } from "../../kube/kube-api.ts";

interface LeaseObject {
  apiVersion?: "coordination.k8s.io/v1";
  kind?: "Lease";
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** MicroTime (RFC 3339 with microseconds), as the API expects for acquireTime/renewTime. */
const microTime = (d: Date) => d.toISOString().replace("Z", "000Z");

export function kubeLeaseBackend(kube: KubeApi, namespace: string): LeaseBackend {
  const collection = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/leases`;
  const path = (name: string) => `${collection}/${encodeURIComponent(name)}`;
  const read = async (name: string) => {
    try {
      return await kube.request<LeaseObject>("GET", path(name), { signal: AbortSignal.timeout(10_000) });
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  };
  const write = async (name: string, body: LeaseObject, create: boolean) => {
    try {
      return create
        ? await kube.request<LeaseObject>("POST", collection, { body, signal: AbortSignal.timeout(10_000) })
        : await kube.request<LeaseObject>("PUT", path(name), { body, signal: AbortSignal.timeout(10_000) });
    } catch (e) {
      if (isConflict(e)) return null; // another contender wrote first
      throw e;
    }
  };
  return {
    async tryAcquire(name, holder, leaseMs) {
      const now = new Date();
      const durationSeconds = Math.max(1, Math.ceil(leaseMs / 1000));
      const current = await read(name);
      const spec = current?.spec ?? {};
      const held = !!spec.holderIdentity;
      const mine = spec.holderIdentity === holder;
      const expired = !held || Date.parse(spec.renewTime ?? "") + (spec.leaseDurationSeconds ?? 0) * 1000 < now.getTime();
      if (current && !mine && !expired) return undefined;
      const transitions = (spec.leaseTransitions ?? 0) + (current && !mine ? 1 : 0);
      const written = await write(
        name,
        {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name, namespace, ...(current?.metadata?.resourceVersion ? { resourceVersion: current.metadata.resourceVersion } : {}) },
          spec: {
            holderIdentity: holder,
            leaseDurationSeconds: durationSeconds,
            acquireTime: mine && spec.acquireTime ? spec.acquireTime : microTime(now),
            renewTime: microTime(now),
            leaseTransitions: transitions,
          },
        },
        !current,
      );
      return written?.spec?.holderIdentity === holder ? { epoch: written.spec.leaseTransitions ?? transitions } : undefined;
    },

    async release(name, holder) {
      const current = await read(name);
      if (!current || current.spec?.holderIdentity !== holder) return;
      await write(
        name,
        {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name, namespace, ...(current.metadata?.resourceVersion ? { resourceVersion: current.metadata.resourceVersion } : {}) },
          spec: { ...current.spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: microTime(new Date()) },
        },
        false,
      );
    },
  };
}
