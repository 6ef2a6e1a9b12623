/**
 * What the node agent publishes about itself on its Node (pure, unit-tested):
 * - `nodeApply`: the SSA body node-ctl applies under its own field manager: labels
 *   (SPACE node, group, id, operator labels, one env label per usable environment),
 *   the node-api, usable-environments and templates annotations and the SPACE taint. Labels it
 *   stops sending are removed by the apiserver because the field manager owned them.
 * - `nodeStatus`: capacity and allocatable (with SPACE's overcommit, including
 *   `space.dev/network-slots` from the slot capacity and `pods`), conditions, addresses.
 */
import type { NodeInventory } from "../../contract/node-api.ts";
import { environmentLabel } from "../../contract/execution-environment.ts";
import { DEFAULT_OVERCOMMIT, type Overcommit } from "../../contract/overcommit.ts";
import {
  NETWORK_SLOTS,
  NODE_API_ANNOTATION,
  NODE_GROUP_LABEL,
  NODE_ID_LABEL,
  NODE_LABEL,
  NODE_TAINT,
  TEMPLATES_ANNOTATION,
  USABLE_ENVIRONMENTS_ANNOTATION,
} from "../../kube/names.ts";

export interface NodeIdentity {
  /** The Node's name: the node agent's id. */
  name: string;
  nodeGroup: string;
  /** SPACE_NODE_LABELS (operator labels matched by node selectors). */
  labels: Record<string, string>;
  /** node-api base URL the control plane calls. */
  nodeApiUrl: string;
}

export function nodeLabels(id: NodeIdentity, usableEnvironments: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {
    ...id.labels,
    [NODE_LABEL]: "true",
    [NODE_GROUP_LABEL]: id.nodeGroup,
    [NODE_ID_LABEL]: id.name,
    "kubernetes.io/hostname": id.name,
    "type": "virtual-kubelet",
  };
  for (const env of [...usableEnvironments].sort()) labels[environmentLabel(env)] = "usable";
  return labels;
}

/** The server-side apply body (metadata labels/annotations and the taint). */
export function nodeApply(id: NodeIdentity, usableEnvironments: readonly string[], templates: readonly string[] = []) {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name: id.name,
      labels: nodeLabels(id, usableEnvironments),
      annotations: {
        [NODE_API_ANNOTATION]: id.nodeApiUrl,
        [USABLE_ENVIRONMENTS_ANNOTATION]: JSON.stringify([...usableEnvironments].sort()),
        [TEMPLATES_ANNOTATION]: JSON.stringify([...templates].sort()),
      },
    },
    spec: { taints: [{ key: NODE_TAINT.key, value: NODE_TAINT.value, effect: NODE_TAINT.effect }] },
  };
}

export function nodeStatus(inv: NodeInventory, opts: { address: string; ready: boolean; message: string; now: Date; version: string; overcommit?: Partial<Overcommit> }) {
  const oc = { ...DEFAULT_OVERCOMMIT, ...opts.overcommit };
  const slots = String(inv.capacity.networkSlots);
  const resources = {
    cpu: String(Math.floor(inv.capacity.vcpu * oc.vcpu)),
    memory: `${Math.floor(inv.capacity.memoryMib * oc.memory)}Mi`,
    "ephemeral-storage": `${Math.floor(inv.capacity.diskMib * oc.disk)}Mi`,
    pods: slots,
    [NETWORK_SLOTS]: slots,
  };
  const t = opts.now.toISOString();
  const cond = (type: string, ok: boolean, reason: string, message: string) => ({
    type,
    status: ok ? "True" : "False",
    reason,
    message,
    lastHeartbeatTime: t,
    lastTransitionTime: t,
  });
  return {
    status: {
      capacity: resources,
      allocatable: resources,
      conditions: [
        cond("Ready", opts.ready, opts.ready ? "SpaceNodeReady" : "SpaceNodeNotReady", opts.message),
        cond("MemoryPressure", false, "SpaceNodeNoPressure", "memory overcommit is SPACE's"),
        cond("DiskPressure", false, "SpaceNodeNoPressure", "disk admission is SPACE's"),
        cond("PIDPressure", false, "SpaceNodeNoPressure", ""),
        cond("NetworkUnavailable", false, "SpaceNodeNetwork", "network slots are SPACE's"),
      ],
      addresses: [
        { type: "InternalIP", address: opts.address },
        { type: "Hostname", address: inv.name || inv.nodeId },
      ],
      nodeInfo: {
        kubeletVersion: `space-${opts.version}`,
        containerRuntimeVersion: `space://${inv.runtime}`,
        operatingSystem: "linux",
        architecture: "amd64",
        osImage: "SPACE node",
        kernelVersion: "",
        kubeProxyVersion: "",
        machineID: inv.nodeId,
        systemUUID: inv.nodeId,
        bootID: "",
      },
      daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
    },
  };
}
