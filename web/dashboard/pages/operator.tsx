// Operator view (admin token): nodes with drain/fence/ready, warm pools (live), tenants
// (each with its keys and tokens: keys.tsx).
import { useEffect, useState } from "preact/hooks";
import { call, live, type FleetNode, type Session, type WarmPool } from "../api.ts";
import { Confirm, ErrorLine, Loaded, Section, fmtTime } from "../ui.tsx";

interface Fleet {
  nodes: FleetNode[];
  pools: WarmPool[];
}

function useFleet(session: Session): { fleet: Fleet | null; error: string | null } {
  const [fleet, setFleet] = useState<Fleet | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => live<Fleet>(session, "/admin/api/v1/events/fleet", "fleet", (f) => (setFleet(f), setError(null)), setError), [session]);
  return { fleet, error };
}

const usage = (n: FleetNode, k: string) => `${n.used[k] ?? 0} / ${n.capacity[k] ?? "?"}`;

export function Nodes({ session }: { session: Session }) {
  const { fleet, error } = useFleet(session);
  const act = (id: string, verb: string, body: unknown) => call(session, "POST", `/admin/api/v1/nodes/${id}/${verb}`, body).then(() => {});
  const keys = [...new Set((fleet?.nodes ?? []).flatMap((n) => Object.keys(n.capacity)))].sort();
  return (
    <Section title="Nodes">
      <Loaded value={fleet} error={error}>
        {(fleet) => (
            <table aria-label="Nodes">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">Sandboxes</th>
                  {keys.map((k) => (
                    <th scope="col">{k} used / capacity</th>
                  ))}
                  <th scope="col">Heartbeat</th>
                  <th scope="col">Actions</th>
                </tr>
              </thead>
              <tbody>
                {fleet.nodes.map((n) => (
                  <tr key={n.id} data-node={n.name}>
                    <td title={n.id}>
                      {n.name}
                      <br />
                      <small>
                        {n.address} · {n.node_group} · {n.version}
                      </small>
                    </td>
                    <td>
                      <span class={`state ${n.status}`} data-status={n.status}>
                        {n.status}
                        {n.drain_mode ? ` (${n.drain_mode})` : ""}
                      </span>
                      {n.status_reason ? <small> {n.status_reason}</small> : null}
                    </td>
                    <td>{n.resident_sandboxes}</td>
                    {keys.map((k) => (
                      <td>{usage(n, k)}</td>
                    ))}
                    <td>{fmtTime(n.last_heartbeat_at)}</td>
                    <td class="row">
                      {n.status === "ready" ? (
                        <>
                          <Confirm label="Drain" question={`Drain node ${n.name}? No new sandboxes are placed on it; its residents stay.`} onConfirm={() => act(n.id, "drain", { mode: "gentle" })} />
                          <Confirm label="Fence" danger question={`Fence node ${n.name}? It is treated as lost: nothing is placed on it and it may not register.`} onConfirm={() => act(n.id, "fence", { reason: "fenced from the dashboard" })} />
                        </>
                      ) : (
                        <Confirm label="Ready" question={`Mark node ${n.name} ready (clear its drain or fence)?`} onConfirm={() => act(n.id, "ready", {})} />
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
        )}
      </Loaded>
    </Section>
  );
}

export function Pools({ session }: { session: Session }) {
  const { fleet, error } = useFleet(session);
  return (
    <Section title="Warm pools">
      <ErrorLine error={error} />
      {fleet === null ? (
        <p aria-busy="true">Loading…</p>
      ) : fleet.pools.length === 0 ? (
        <p>No warm pools (PUT /admin/api/v1/warm-pools/&lt;template&gt; makes one).</p>
      ) : (
        <table aria-label="Warm pools">
          <thead>
            <tr>
              <th scope="col">Template</th>
              <th scope="col">Tenant</th>
              <th scope="col">Size</th>
              <th scope="col">Idle policy</th>
              <th scope="col">Status</th>
            </tr>
          </thead>
          <tbody>
            {fleet.pools.map((p) => (
              <tr key={p.template}>
                <td>{p.template}</td>
                <td>{p.tenant_id ?? "any"}</td>
                <td>{p.size}</td>
                <td>{p.idle_policy}</td>
                <td>
                  {Object.entries(p.status ?? {})
                    .map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : String(v)}`)
                    .join(", ")}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

interface Tenant {
  id: string;
  name: string;
  disabledAt: string | null;
  createdAt: string;
}

export function Tenants({ session }: { session: Session }) {
  const [tenants, setTenants] = useState<Tenant[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    call<{ tenants: Tenant[] }>(session, "GET", "/admin/api/v1/tenants").then((r) => setTenants(r.tenants), (e: Error) => setError(e.message));
  }, [session]);
  return (
    <Section title="Tenants">
      <Loaded value={tenants} error={error}>
        {(tenants) => (
            <table aria-label="Tenants">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">ID</th>
                  <th scope="col">State</th>
                  <th scope="col">Credentials</th>
                </tr>
              </thead>
              <tbody>
                {tenants.map((t) => (
                  <tr key={t.id} data-tenant={t.name}>
                    <td>{t.name}</td>
                    <td>{t.id}</td>
                    <td>{t.disabledAt ? "disabled" : "active"}</td>
                    <td>
                      <a href={`#/tenants/${t.id}`} aria-label={`Keys and tokens of ${t.name}`}>
                        Keys and tokens
                      </a>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
        )}
      </Loaded>
    </Section>
  );
}
