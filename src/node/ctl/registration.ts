/**
 * node-ctl's link to the control plane over HTTP (a standalone `space node`): registers
 * with verify (the control plane calls this node back at its advertised address and
 * checks its id), then heartbeats its inventory. A heartbeat refused because the node is
 * unknown (404) or its address changed (409) registers again, which re-verifies.
 *
 * Refusals (403 wrong credential or fenced, 409 id conflict, 422 verify failed) are
 * retried with backoff until the deadline, like the reference; each is logged with the
 * control plane's reason. A 403 naming labels outside the control plane's label fence
 * (SPACE_NODE_LABEL_PREFIXES) is reconciled at once: the node drops those labels, says
 * which, and registers with the rest.
 */
import { SpaceError, fromHttpStatus } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { NodeInventory } from "../../contract/node-api.ts";

export interface ControlPlaneLinkOptions {
  /** SPACE_NODE_CONTROL_URL, e.g. http://10.0.0.1:3000 */
  controlUrl: string;
  /** The node credential: SPACE_INTERNAL_TOKEN. */
  token: string;
  /** node-api URL the control plane reaches this node at. */
  address: () => string;
  nodeGroup: string;
  labels: Record<string, string>;
  version: string;
  logger: Logger;
  /** Per request. */
  timeoutMs?: number;
}

export interface ControlPlaneLink {
  /** Registers (verify: true), retrying with backoff until `deadline` (epoch ms). */
  registerUntil(inventory: () => Promise<NodeInventory>, deadline: number, signal?: AbortSignal): Promise<void>;
  /** The heartbeat's publish: no-op before the first registration succeeded. */
  publish(inv: NodeInventory): Promise<void>;
  /** Ids the control plane wants on this node; undefined when it does not know the node yet. */
  wanted(nodeId: string | undefined): Promise<Set<string> | undefined>;
  /** Tells the control plane which sandboxes the node kept at its start (it fails the others' records). */
  reconciled(nodeId: string | undefined, kept: ReadonlySet<string>): Promise<void>;
  /** Reports a sandbox the watchdog found unhealthy; true when the control plane failed its record (the node may kill it). */
  unhealthy(nodeId: string | undefined, sandboxId: string, reason: string): Promise<boolean>;
  /** Status the control plane last answered (ready, draining, fenced…). */
  readonly status: string | undefined;
}

export class ControlPlaneError extends SpaceError {
  constructor(
    readonly status: number,
    message: string,
    /** The refusal's JSON body, when there was one. */
    readonly body?: unknown,
  ) {
    super(fromHttpStatus(status), message, { retryable: true });
  }
}

/** Label keys a 403 from the label fence names (`refused_labels`). */
function refusedLabels(e: unknown): string[] {
  if (!(e instanceof ControlPlaneError) || e.status !== 403) return [];
  const r = (e.body as { refused_labels?: unknown } | undefined)?.refused_labels;
  return Array.isArray(r) ? r.filter((k): k is string => typeof k === "string") : [];
}

export function createControlPlaneLink(o: ControlPlaneLinkOptions): ControlPlaneLink {
  const base = o.controlUrl.replace(/\/+$/, "") + "/admin/api/v1/nodes";
  let registered = false;
  let status: string | undefined;
  /** What the node publishes: its configured labels less any the label fence refused. */
  const labels = { ...o.labels };
  const log = o.logger;

  const call = async (method: string, url: string, body: unknown, signal?: AbortSignal): Promise<unknown> => {
    const timeout = AbortSignal.timeout(o.timeoutMs ?? 15_000);
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: { authorization: `Bearer ${o.token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
    } catch (e) {
      throw new ControlPlaneError(503, `control plane ${o.controlUrl} unreachable: ${(e as Error).message}`);
    }
    const text = await res.text();
    if (!res.ok) {
      let msg = text.slice(0, 500);
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
        msg = (parsed as { message?: string }).message ?? msg;
      } catch {
        /* not JSON */
      }
      throw new ControlPlaneError(res.status, `${method} ${new URL(url).pathname} → ${res.status}: ${msg}`, parsed);
    }
    return text ? JSON.parse(text) : undefined;
  };

  const registerOnce = async (inv: NodeInventory, signal?: AbortSignal) => {
    const r = (await call(
      "POST",
      base,
      {
        id: inv.nodeId,
        name: inv.name,
        address: o.address(),
        node_group: o.nodeGroup,
        labels,
        verify: true,
        capacity: inv.capacity,
        used: inv.used,
        usable_environments: inv.usableEnvironments,
        templates: inv.templates,
        version: o.version,
      },
      signal,
    )) as { status?: string };
    status = r?.status;
    registered = true;
  };

  return {
    get status() {
      return status;
    },

    async registerUntil(inventory, deadline, signal) {
      let delay = 250;
      let attempt = 0;
      for (;;) {
        attempt++;
        try {
          await registerOnce(await inventory(), signal);
          log.info(
            { controlUrl: o.controlUrl, address: o.address(), group: o.nodeGroup, status, attempt },
            "node registered with the control plane (verified)",
          );
          return;
        } catch (e) {
          const err = SpaceError.from(e);
          if (signal?.aborted) throw err;
          const refused = refusedLabels(e).filter((k) => k in labels);
          if (refused.length) {
            for (const k of refused) delete labels[k];
            log.warn({ refusedLabels: refused, reason: err.message }, "the control plane's label fence refused these labels; registering without them");
            continue;
          }
          if (Date.now() + delay > deadline) {
            throw new SpaceError(
              "deadline_exceeded",
              `node registration did not succeed before the deadline (${attempt} attempts): ${err.message}`,
            );
          }
          log.warn({ attempt, retryInMs: delay, reason: err.message }, "node registration refused or failed; retrying");
          await new Promise((r) => setTimeout(r, delay));
          delay = Math.min(delay * 2, 5_000);
        }
      }
    },

    async publish(inv) {
      if (!registered) return;
      try {
        const r = (await call("POST", `${base}/${inv.nodeId}/heartbeat`, {
          address: o.address(),
          capacity: inv.capacity,
          used: inv.used,
          usable_environments: inv.usableEnvironments,
          templates: inv.templates,
        })) as { status?: string };
        if (r?.status && r.status !== status) log.info({ from: status, to: r.status }, "control plane reports a new node status");
        status = r?.status;
      } catch (e) {
        // Unknown to the control plane, or registered at another address: register again.
        if (e instanceof ControlPlaneError && (e.status === 404 || e.status === 409)) {
          log.warn({ reason: e.message }, "heartbeat refused; registering again");
          await registerOnce(inv);
          return;
        }
        throw e;
      }
    },

    async reconciled(nodeId, kept) {
      if (!nodeId) return;
      try {
        await call("POST", `${base}/${nodeId}/reconciled`, { sandbox_ids: [...kept] });
      } catch (e) {
        // Unknown node (first start): it has no records to converge.
        if (e instanceof ControlPlaneError && e.status === 404) return;
        throw e;
      }
    },

    async unhealthy(nodeId, sandboxId, reason) {
      if (!nodeId) return false;
      try {
        await call("POST", `${base}/${nodeId}/sandboxes/${encodeURIComponent(sandboxId)}/unhealthy`, { reason });
        return true;
      } catch (e) {
        if (e instanceof ControlPlaneError && e.status === 404) return false;
        throw e;
      }
    },

    async wanted(nodeId) {
      if (!nodeId) return undefined;
      try {
        const r = (await call("GET", `${base}/${nodeId}/sandboxes`, undefined)) as { sandbox_ids: string[] };
        return new Set(r.sandbox_ids);
      } catch (e) {
        if (e instanceof ControlPlaneError && e.status === 404) return undefined;
        log.warn({ err: e }, "could not ask the control plane which sandboxes to keep; keeping all");
        return undefined;
      }
    },
  };
}
