// Operator view: every tenant's operations (the queue, recent failures with their codes) and
// the environment placement census. Both are read on demand (a Refresh button, no polling).
import { useEffect, useState } from "preact/hooks";
import { call, type Session } from "../api.ts";
import { Loaded, Section, fmtTime } from "../ui.tsx";

interface Operation {
  id: string;
  kind: string;
  state: string;
  target: string;
  tenant_id: string | null;
  queued_at: string;
  claimed_at: string | null;
  failed_at: string | null;
  deadline_at: string | null;
  failure: { code: string; message: string } | null;
}

const FAILURES_SHOWN = 50;

/** `read` once per session and on each refresh (it is rebuilt every render, so the session keys it). */
function useRead<T>(session: Session, read: () => Promise<T>): { data: T | null; error: string | null; refresh: () => void } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    read().then((d) => (setData(d), setError(null)), (e: Error) => setError(e.message));
  }, [session, tick]);
  return { data, error, refresh: () => setTick((t) => t + 1) };
}

export function AdminOperations({ session }: { session: Session }) {
  const list = (state: string, limit: number) =>
    call<{ operations: Operation[] }>(session, "GET", `/admin/api/v1/operations?state=${state}&limit=${limit}`).then((r) => r.operations);
  const { data, error, refresh } = useRead(session, async () => {
    const [queued, claimed, failed] = await Promise.all([list("queued", 200), list("claimed", 200), list("failed", FAILURES_SHOWN)]);
    return { queue: [...claimed, ...queued], failed };
  });
  return (
    <Section title="Operations">
      <Loaded value={data} error={error} refresh={refresh}>
        {(data) => (
            <>
              <OperationTable title="Queue" caption={`${data.queue.length} queued or claimed`} ops={data.queue} />
              <OperationTable title="Recent failures" caption={`the last ${FAILURES_SHOWN} at most, newest first`} ops={data.failed} failures />
            </>
        )}
      </Loaded>
    </Section>
  );
}

function OperationTable({ title, caption, ops, failures }: { title: string; caption: string; ops: Operation[]; failures?: boolean }) {
  return (
    <Section title={title}>
      {ops.length === 0 ? (
        <p>None.</p>
      ) : (
        <table aria-label={title}>
          <caption>{caption}</caption>
          <thead>
            <tr>
              <th scope="col">Queued</th>
              <th scope="col">Kind</th>
              <th scope="col">Target</th>
              <th scope="col">Tenant</th>
              <th scope="col">State</th>
              {failures ? <th scope="col">Error code</th> : <th scope="col">Deadline</th>}
              {failures ? <th scope="col">Message</th> : null}
            </tr>
          </thead>
          <tbody>
            {ops.map((o) => (
              <tr key={o.id} data-operation={o.id}>
                <td title={o.id}>{fmtTime(o.queued_at)}</td>
                <td>{o.kind}</td>
                <td>{o.target}</td>
                <td>{o.tenant_id ?? "cluster"}</td>
                <td>
                  <span class={`state ${o.state}`}>{o.state}</span>
                </td>
                {failures ? (
                  <td>
                    <code>{o.failure?.code ?? ""}</code>
                  </td>
                ) : (
                  <td>{fmtTime(o.deadline_at)}</td>
                )}
                {failures ? <td>{o.failure?.message ?? ""}</td> : null}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

interface Census {
  gate: string;
  running: Record<string, number>;
  pending: Record<string, number>;
  computed_at: string;
}

const MEANING: Record<string, string> = {
  admitted: "its node publishes the template's environment",
  no_evidence: "no binding, or no ready node publishes any environment",
  environment_not_usable: "its node (or, pending, no ready node) does not publish the environment",
};

export function PlacementCensus({ session }: { session: Session }) {
  const { data, error, refresh } = useRead(session, () => call<Census>(session, "GET", "/admin/api/v1/placement/census"));
  return (
    <Section title="Placement census">
      <Loaded value={data} error={error} refresh={refresh}>
        {(data) => (
            <>
              <dl class="facts">
                <dt>Environment gate</dt>
                <dd data-gate={data.gate}>{data.gate}</dd>
                <dt>Computed</dt>
                <dd>{fmtTime(data.computed_at)}</dd>
              </dl>
              {data.gate === "off" ? (
                <p class="hint">The gate is off: placement ignores environments and the leader does not report these as metrics; the figures are computed here anyway.</p>
              ) : null}
              <CensusTable title="Running sandboxes" label="Placement" counts={data.running} />
              <CensusTable title="Pending sandboxes" label="Reason" counts={data.pending} />
            </>
        )}
      </Loaded>
    </Section>
  );
}

function CensusTable({ title, label, counts }: { title: string; label: string; counts: Record<string, number> }) {
  return (
    <table aria-label={title}>
      <caption>{title}</caption>
      <thead>
        <tr>
          <th scope="col">{label}</th>
          <th scope="col">Sandboxes</th>
          <th scope="col">Meaning</th>
        </tr>
      </thead>
      <tbody>
        {Object.entries(counts).map(([k, v]) => (
          <tr key={k} data-census={k}>
            <td>
              <code>{k}</code>
            </td>
            <td>{v}</td>
            <td>{MEANING[k] ?? ""}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
