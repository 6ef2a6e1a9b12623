/**
 * The names SPACE writes into Kubernetes objects, in one place: the pod renderer, the
 * substrate, the node agent's virtual kubelet and the deploy manifests agree on them.
 */
import { createHash } from "node:crypto";

/** Node label and taint key carried by every SPACE virtual node (value "true"). */
export const NODE_LABEL = "space.dev/node";
/** The taint every SPACE node carries so only sandbox pods land there. */
export const NODE_TAINT = { key: NODE_LABEL, value: "true", effect: "NoSchedule" } as const;
/** Node label naming the node group (Direct's `node_group`). */
export const NODE_GROUP_LABEL = "space.dev/node-group";
/** Node annotation: the node-api base URL the control plane calls (pause, exec proxy, metrics). */
export const NODE_API_ANNOTATION = "space.dev/node-api";
/** Node annotation: the node's usable environments (JSON array of digests; labels carry only prefixes). */
export const USABLE_ENVIRONMENTS_ANNOTATION = "space.dev/usable-environments";
/** Node annotation: the template ids in the node's cache (JSON array; the control plane resolves `base` from it). */
export const TEMPLATES_ANNOTATION = "space.dev/templates";
/** Node label: the node agent's id (its node-id file). The Node's name is that id too. */
export const NODE_ID_LABEL = "space.dev/node-id";
/** Extended resource: one network slot per sandbox. */
export const NETWORK_SLOTS = "space.dev/network-slots";
/** `runtimeClassName` of sandbox pods. */
export const RUNTIME_CLASS = "space";
/** Field manager of node-ctl's server-side apply of its Node's labels. */
export const NODE_CTL_FIELD_MANAGER = "space-node-ctl";
/** Field manager of the control plane (pods it creates and patches). */
export const CONTROL_PLANE_FIELD_MANAGER = "space-control-plane";
/** Component name on the Events the node agent records (as kubelet's `kubelet`). */
export const KUBELET_COMPONENT = "space-kubelet";

/** Pod labels and annotations tying a pod to its sandbox and execution. */
export const POD_MANAGED_BY = { "app.kubernetes.io/managed-by": "space" } as const;
export const SANDBOX_LABEL = "space.dev/sandbox";
export const EXECUTION_LABEL = "space.dev/execution";
export const SANDBOX_ID_ANNOTATION = "space.dev/sandbox-id";
export const TEMPLATE_ANNOTATION = "space.dev/template";
/** Shadow and on: the environment the work is bound to (a digest). */
export const ENVIRONMENT_ANNOTATION = "space.dev/environment";
/**
 * The name of the Secret holding what the node runs (the SandboxSpec, with the envd
 * token and env vars, and for restores the snapshot descriptor); set by `start` once the
 * pod is bound. The pod itself never carries them.
 */
export const SPEC_SECRET_ANNOTATION = "space.dev/sandbox-spec-secret";
/** Keys of that Secret. */
export const SPEC_SECRET_KEY = "spec";
export const RESTORE_SECRET_KEY = "restore-snapshot";
/** `type` of that Secret. */
export const SPEC_SECRET_TYPE = "space.dev/sandbox-spec";

/** The Event reason a node records when it refuses to run a pod (as kubelet does). */
export const REFUSAL_REASON = "FailedCreatePodSandBox";

/** `[space-err=<Code>]` in a refusal event's message. */
export function refusalMarker(code: string): string {
  return `[space-err=${code}]`;
}
export function parseRefusalMarker(message: string): string | null {
  const m = /\[space-err=([A-Za-z]+)\]/.exec(message);
  return m ? m[1]! : null;
}

/** A DNS-1123 label from an id (lowercase, [a-z0-9-], at most 63). */
export function toDnsLabel(s: string): string {
  const out = s
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 63)
    .replace(/-+$/, "");
  return out || "x";
}

/** A label value from an id ([A-Za-z0-9._-], at most 63, alphanumeric at both ends). */
export function toLabelValue(s: string): string {
  return s
    .replace(/[^A-Za-z0-9._-]+/g, "-")
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, "");
}

/**
 * The pod of a sandbox: one at a time (a new execution replaces a deleted pod). Ids that
 * are not DNS labels as they are get a hash suffix so two never share a pod.
 */
export function podNameOf(sandboxId: string): string {
  const label = toDnsLabel(sandboxId);
  if (label === sandboxId && label.length <= 59) return `sbx-${label}`;
  const h = createHash("sha256").update(sandboxId).digest("hex").slice(0, 8);
  return `sbx-${label.slice(0, 50).replace(/-+$/, "")}-${h}`;
}
