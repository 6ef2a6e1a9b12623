/**
 * A sandbox as a Pod (pure: no I/O, table-tested). kube-scheduler places it; the node
 * agent that plays kubelet for the chosen virtual node runs it.
 *
 * The environment gate (behaviours.md C) changes the rendering only here:
 * - `off`: no environment anywhere.
 * - `shadow`: exactly `off`'s pod plus the annotation `space.dev/environment` on bound
 *   work (the PodSpec is byte for byte `off`'s: the spec is rendered without looking at
 *   the gate, the annotation is added after). Unreadable bindings are placed as `off`
 *   and reported in `warnings`.
 * - `on`: also the environment's node label in every required node-affinity term
 *   (shortlist terms included); an unreadable binding refuses before any pod exists.
 */
import { SpaceError } from "../../core/errors.ts";
import { environmentLabel } from "../../contract/execution-environment.ts";
import type { GateMode } from "../placement.ts";
import type { PlacementRequest } from "../substrate.ts";
import {
  ENVIRONMENT_ANNOTATION,
  NETWORK_SLOTS,
  NODE_GROUP_LABEL,
  NODE_LABEL,
  NODE_TAINT,
  POD_MANAGED_BY,
  RUNTIME_CLASS,
  SANDBOX_ID_ANNOTATION,
  SANDBOX_LABEL,
  TEMPLATE_ANNOTATION,
  podNameOf,
  toLabelValue,
} from "../../kube/names.ts";

/** The subset of core/v1 Pod SPACE renders (plain JSON; what goes on the wire). */
export interface NodeSelectorRequirement {
  key: string;
  operator: "In" | "NotIn" | "Exists" | "DoesNotExist";
  values?: string[];
}
export interface NodeSelectorTerm {
  matchExpressions?: NodeSelectorRequirement[];
  matchFields?: NodeSelectorRequirement[];
}
export interface PodSpecRendered {
  runtimeClassName: string;
  restartPolicy: "Never";
  automountServiceAccountToken: false;
  enableServiceLinks: false;
  terminationGracePeriodSeconds: number;
  affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: NodeSelectorTerm[] } } };
  tolerations: Array<{ key: string; operator: "Exists"; effect: string }>;
  containers: Array<{
    name: string;
    image: string;
    resources: { requests: Record<string, string>; limits: Record<string, string> };
  }>;
}
export interface PodRendered {
  apiVersion: "v1";
  kind: "Pod";
  metadata: { name: string; namespace: string; labels: Record<string, string>; annotations: Record<string, string> };
  spec: PodSpecRendered;
}

/** What placement asks for, rendered as a Pod (a pin becomes a shortlist of one). */
export interface PodRenderInput extends Omit<PlacementRequest, "pinnedNodeId"> {
  namespace: string;
  /**
   * Nodes (Node names) the work may go to, one required term each (a restore's
   * shortlist; a pinned restore is a shortlist of one). Absent = any node.
   */
  shortlist?: readonly string[];
}

export interface PodRendering {
  pod: PodRendered;
  /** Shadow: what `on` would have refused, and unreadable bindings placed as `off`. */
  warnings: string[];
}

/** vCPU as a Kubernetes quantity (millicores when fractional). */
export function cpuQuantity(vcpu: number): string {
  return Number.isInteger(vcpu) ? String(vcpu) : `${Math.round(vcpu * 1000)}m`;
}

export function renderPod(input: PodRenderInput, gate: GateMode): PodRendering {
  const binding = input.environment ?? { kind: "none" };
  const warnings: string[] = [];
  if (gate === "on" && binding.kind === "unreadable") {
    throw new SpaceError(
      "failed_precondition",
      `environment placement gate is on and the work's environment binding is unreadable: ${binding.reason}`,
    );
  }
  if (gate === "shadow" && binding.kind === "unreadable") warnings.push(`unreadable environment binding placed as off: ${binding.reason}`);
  const requireEnv = gate === "on" && binding.kind === "bound" ? environmentLabel(binding.environment) : undefined;
  const spec = renderSpec(input, requireEnv);
  const annotations: Record<string, string> = {
    [SANDBOX_ID_ANNOTATION]: input.sandboxId,
    [TEMPLATE_ANNOTATION]: input.templateId,
  };
  if (gate !== "off" && binding.kind === "bound") annotations[ENVIRONMENT_ANNOTATION] = binding.environment;
  return {
    pod: {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: podNameOf(input.sandboxId),
        namespace: input.namespace,
        labels: { ...POD_MANAGED_BY, [SANDBOX_LABEL]: toLabelValue(input.sandboxId) },
        annotations,
      },
      spec,
    },
    warnings,
  };
}

/** The PodSpec: depends on the gate only through `requireEnvLabel` (`on` + bound work). */
function renderSpec(input: PodRenderInput, requireEnvLabel: string | undefined): PodSpecRendered {
  const base: NodeSelectorRequirement[] = [{ key: NODE_LABEL, operator: "In", values: ["true"] }];
  if (input.nodeGroup !== undefined) base.push({ key: NODE_GROUP_LABEL, operator: "In", values: [input.nodeGroup] });
  for (const [k, v] of Object.entries(input.nodeSelector ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    base.push({ key: k, operator: "In", values: [v] });
  }
  if (requireEnvLabel) base.push({ key: requireEnvLabel, operator: "In", values: ["usable"] });
  // Terms are ORed: each shortlist entry is its own term and repeats every requirement,
  // so no term can admit a node without the environment label.
  const terms: NodeSelectorTerm[] = input.shortlist?.length
    ? input.shortlist.map((node) => ({
        matchExpressions: base.map((r) => ({ ...r, values: [...(r.values ?? [])] })),
        matchFields: [{ key: "metadata.name", operator: "In", values: [node] }],
      }))
    : [{ matchExpressions: base }];
  const slots = { [NETWORK_SLOTS]: "1" };
  return {
    runtimeClassName: RUNTIME_CLASS,
    restartPolicy: "Never",
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    terminationGracePeriodSeconds: 10,
    affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } } },
    tolerations: [{ key: NODE_TAINT.key, operator: "Exists", effect: NODE_TAINT.effect }],
    containers: [
      {
        name: "sandbox",
        // Never pulled: the node agent runs the template named in the annotation.
        image: "space.dev/sandbox",
        resources: {
          // Requests are what the scheduler counts against the node's allocatable (which
          // the node publishes with SPACE's overcommit); extended resources need limits.
          requests: {
            cpu: cpuQuantity(input.vcpu),
            memory: `${input.memoryMib}Mi`,
            "ephemeral-storage": `${input.diskMib}Mi`,
            ...slots,
          },
          limits: { ...slots },
        },
      },
    ],
  };
}

/** Every required node-affinity term of a pod (for assertions and the census). */
export function requiredTerms(pod: { spec?: { affinity?: unknown } }): NodeSelectorTerm[] {
  const a = pod.spec?.affinity as PodSpecRendered["affinity"] | undefined;
  return a?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
}
