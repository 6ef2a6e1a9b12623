// Tenant view: the sandboxes list (live), one sandbox's detail and actions.
import { useEffect, useMemo, useState } from "preact/hooks";
import type { ComponentType } from "preact";
import { call, live, type Sandbox, type Session } from "../api.ts";
import { Chart, Confirm, ErrorLine, Loaded, Section, fmtTime } from "../ui.tsx";
import type { EnvdTarget } from "../envd.ts";
import { Files } from "./files.tsx";

const STATES = ["", "creating", "running", "pausing", "paused", "suspending", "suspended", "resuming"];

export function SandboxList({ session }: { session: Session }) {
  const [list, setList] = useState<Sandbox[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [state, setState] = useState("");
  const [template, setTemplate] = useState("");
  const [meta, setMeta] = useState("");
  useEffect(
    () =>
      live<{ sandboxes: Sandbox[] }>(
        session,
        "/v1/events/sandboxes",
        "sandboxes",
        (d) => {
          setList(d.sandboxes);
          setError(null);
        },
        setError,
      ),
    [session],
  );
  const shown = useMemo(() => {
    const pairs = meta
      .split(",")
      .map((p) => p.trim())
      .filter(Boolean)
      .map((p) => p.split("=") as [string, string | undefined]);
    return (list ?? []).filter(
      (s) =>
        (!state || s.state === state) &&
        (!template || s.template.includes(template) || (s.alias ?? "").includes(template)) &&
        pairs.every(([k, v]) => (v === undefined ? k in s.metadata : s.metadata[k] === v)),
    );
  }, [list, state, template, meta]);
  return (
    <Section title="Sandboxes">
      <form class="filters" role="search" aria-label="Filter sandboxes" onSubmit={(e) => e.preventDefault()}>
        <label>
          State
          <select value={state} onChange={(e) => setState(e.currentTarget.value)}>
            {STATES.map((s) => (
              <option value={s}>{s || "any"}</option>
            ))}
          </select>
        </label>
        <label>
          Template
          <input value={template} onInput={(e) => setTemplate(e.currentTarget.value)} placeholder="id or alias" />
        </label>
        <label>
          Metadata
          <input value={meta} onInput={(e) => setMeta(e.currentTarget.value)} placeholder="key=value, key" />
        </label>
      </form>
      <Loaded value={list} error={error}>
        {(list) => (
            <table aria-label="Sandboxes" data-count={shown.length}>
              <caption>
                {shown.length} of {list.length} live sandboxes
              </caption>
              <thead>
                <tr>
                  <th scope="col">ID</th>
                  <th scope="col">State</th>
                  <th scope="col">Template</th>
                  <th scope="col">vCPU / MiB</th>
                  <th scope="col">Metadata</th>
                  <th scope="col">Started</th>
                  <th scope="col">Ends</th>
                </tr>
              </thead>
              <tbody>
                {shown.map((s) => (
                  <tr key={s.id} data-sandbox={s.id}>
                    <td>
                      <a href={`#/sandboxes/${s.id}`}>{s.id}</a>
                    </td>
                    <td>
                      <span class={`state ${s.state}`}>{s.state}</span>
                    </td>
                    <td>{s.alias ?? s.template}</td>
                    <td>
                      {s.vcpu} / {s.memory_mib}
                    </td>
                    <td>
                      {Object.entries(s.metadata)
                        .map(([k, v]) => `${k}=${v}`)
                        .join(", ")}
                    </td>
                    <td>{fmtTime(s.started_at)}</td>
                    <td>{fmtTime(s.end_at)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
        )}
      </Loaded>
    </Section>
  );
}

interface Metric {
  timestamp: string;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
}
interface EcwDetail {
  envdAccessToken?: string;
  network?: unknown;
}
interface LogLine {
  timestamp: string;
  level: string;
  message: string;
}

export function SandboxDetail({ session, id, tab }: { session: Session; id: string; tab: string }) {
  const [sb, setSb] = useState<Sandbox | null>(null);
  const [ecw, setEcw] = useState<EcwDetail | null>(null);
  const [gone, setGone] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  const refresh = () => setTick((t) => t + 1);
  useEffect(() => {
    call<Sandbox>(session, "GET", `/v1/sandboxes/${id}`)
      .then((s) => (setSb(s), setGone(false)))
      .catch((e: { status?: number; message: string }) => (e.status === 404 ? setGone(true) : setError(e.message)));
    call<EcwDetail>(session, "GET", `/sandboxes/${id}`)
      .then(setEcw)
      .catch(() => setEcw(null));
  }, [session, id, tick]);
  // The list stream says when this sandbox changes state or goes.
  useEffect(
    () =>
      live<{ sandboxes: Sandbox[] }>(
        session,
        "/v1/events/sandboxes",
        "sandboxes",
        (d) => {
          const mine = d.sandboxes.find((s) => s.id === id);
          if (mine) setSb(mine);
          else refresh();
        },
        () => {},
      ),
    [session, id],
  );
  const act = async (method: string, path: string, body?: unknown) => {
    setError(null);
    await call(session, method, path, body);
    refresh();
  };
  if (gone)
    return (
      <Section title={`Sandbox ${id}`}>
        <p role="status">Sandbox {id} is gone (killed or never existed).</p>
        <a href="#/sandboxes">Back to sandboxes</a>
      </Section>
    );
  if (!sb) return <p aria-busy="true">Loading…</p>;
  const target = { sandboxUrl: session.sandboxUrl, sandboxId: id, accessToken: ecw?.envdAccessToken };
  return (
    <Section title={`Sandbox ${id}`}>
      <dl class="facts">
        <dt>State</dt>
        <dd>
          <span class={`state ${sb.state}`}>{sb.state}</span> {sb.reason ? `(${sb.reason})` : ""}
        </dd>
        <dt>Template</dt>
        <dd>{sb.alias ?? sb.template}</dd>
        <dt>Shape</dt>
        <dd>
          {sb.vcpu} vCPU, {sb.memory_mib} MiB memory, {sb.disk_mib} MiB disk
        </dd>
        <dt>Node</dt>
        <dd>{sb.node_id ?? "—"}</dd>
        <dt>Ends</dt>
        <dd>{fmtTime(sb.end_at)}</dd>
      </dl>
      <div class="row" role="toolbar" aria-label="Sandbox actions">
        <Confirm label="Kill" danger question={`Kill sandbox ${id}? Its processes and files are gone for good.`} onConfirm={() => act("DELETE", `/sandboxes/${id}`)} />
        {sb.state === "running" ? <Confirm label="Pause" question={`Pause sandbox ${id} (memory and disk kept)?`} onConfirm={() => act("POST", `/sandboxes/${id}/pause`, {})} /> : null}
        {sb.state === "paused" || sb.state === "suspended" ? <button type="button" onClick={() => act("POST", `/sandboxes/${id}/resume`, {}).catch((e: Error) => setError(e.message))}>Resume</button> : null}
        <button type="button" onClick={() => act("POST", `/sandboxes/${id}/fork`, {}).catch((e: Error) => setError(e.message))}>
          Fork
        </button>
        <TimeoutForm onSet={(s) => act("POST", `/sandboxes/${id}/timeout`, { timeout: s })} />
      </div>
      <ErrorLine error={error} />
      <nav class="tabs" aria-label="Sandbox sections">
        {["overview", "terminal", "files"].map((t) => (
          <a href={`#/sandboxes/${id}/${t}`} aria-current={tab === t ? "page" : undefined}>
            {t[0]!.toUpperCase() + t.slice(1)}
          </a>
        ))}
      </nav>
      {tab === "terminal" ? <LazyTerminal target={target} /> : tab === "files" ? <Files target={target} /> : <Overview session={session} id={id} ecw={ecw} />}
    </Section>
  );
}

/**
 * The terminal tab, loaded when first opened: xterm.js is most of the dashboard's script,
 * and every other page loads faster without it (issue 23: pages in under a second).
 */
function LazyTerminal({ target }: { target: EnvdTarget }) {
  const [Terminal, setTerminal] = useState<ComponentType<{ target: EnvdTarget }> | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    import("./terminal.tsx").then((m) => setTerminal(() => m.Terminal), (e: Error) => setError(`the terminal did not load: ${e.message}`));
  }, []);
  if (error) return <ErrorLine error={error} />;
  return Terminal ? <Terminal target={target} /> : <p aria-busy="true">Loading the terminal…</p>;
}

function TimeoutForm({ onSet }: { onSet: (seconds: number) => Promise<void> }) {
  const [v, setV] = useState("300");
  const [error, setError] = useState<string | null>(null);
  return (
    <form
      class="inline"
      onSubmit={(e) => {
        e.preventDefault();
        setError(null);
        onSet(Number(v)).catch((err: Error) => setError(err.message));
      }}
    >
      <label>
        Timeout (s)
        <input type="number" min="1" value={v} onInput={(e) => setV(e.currentTarget.value)} size={6} />
      </label>
      <button type="submit">Set timeout</button>
      <ErrorLine error={error} />
    </form>
  );
}

function Overview({ session, id, ecw }: { session: Session; id: string; ecw: EcwDetail | null }) {
  const [metrics, setMetrics] = useState<Metric[]>([]);
  const [logs, setLogs] = useState<LogLine[]>([]);
  const [network, setNetwork] = useState<unknown>(null);
  const [snapshots, setSnapshots] = useState<Array<{ snapshotID: string; createdAt?: string }>>([]);
  useEffect(() => {
    call<Metric[]>(session, "GET", `/sandboxes/${id}/metrics`).then(setMetrics, () => {});
    call<{ logs: LogLine[] }>(session, "GET", `/v2/sandboxes/${id}/logs?limit=200`).then((r) => setLogs(r.logs), () => {});
    call(session, "GET", `/v1/sandboxes/${id}/network`).then(setNetwork, () => {});
    call<Array<{ snapshotID: string; createdAt?: string }>>(session, "GET", `/snapshots?sandboxID=${id}`).then(setSnapshots, () => {});
  }, [session, id]);
  const series = (f: (m: Metric) => number) => metrics.map((m) => ({ t: Date.parse(m.timestamp), v: f(m) }));
  const mib = 1024 * 1024;
  return (
    <>
      <Section title="Usage">
        <div class="charts">
          <Chart title="CPU" unit="%" points={series((m) => m.cpuUsedPct)} max={100} />
          <Chart title="Memory" unit="MiB" points={series((m) => m.memUsed / mib)} max={(metrics.at(-1)?.memTotal ?? 0) / mib || undefined} />
          <Chart title="Disk" unit="MiB" points={series((m) => m.diskUsed / mib)} max={(metrics.at(-1)?.diskTotal ?? 0) / mib || undefined} />
        </div>
      </Section>
      <Section title="Network policy">
        <pre>{JSON.stringify({ policy: ecw?.network ?? "default", ...(network as object) }, null, 2)}</pre>
      </Section>
      <Section title="Snapshots">
        {snapshots.length ? (
          <ul>
            {snapshots.map((s) => (
              <li>
                {s.snapshotID} {fmtTime(s.createdAt)}
              </li>
            ))}
          </ul>
        ) : (
          <p>No snapshots.</p>
        )}
      </Section>
      <Section title="Logs">
        <pre class="logs" tabIndex={0} aria-label="Sandbox logs">
          {logs.map((l) => `${l.timestamp} ${l.level} ${l.message}`).join("\n") || "No log lines."}
        </pre>
      </Section>
    </>
  );
}
