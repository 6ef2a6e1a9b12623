// Tenant view: templates with their builds and build logs, and operations.
import { useEffect, useState } from "preact/hooks";
import { call, type Session } from "../api.ts";
import { Loaded, Section, fmtTime } from "../ui.tsx";

interface Build {
  id: string;
  status: string;
  error: string | null;
  created_at: string;
  finished_at: string | null;
}
interface Template {
  id: string;
  name: string;
  owner: string;
  public: boolean;
  builds: Build[];
}

export function Templates({ session }: { session: Session }) {
  const [templates, setTemplates] = useState<Template[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [logs, setLogs] = useState<{ title: string; text: string } | null>(null);
  useEffect(() => {
    call<{ templates: Template[] }>(session, "GET", "/v1/templates").then((r) => setTemplates(r.templates), (e: Error) => setError(e.message));
  }, [session]);
  const showLogs = async (t: Template, b: Build) => {
    const r = await call<{ logs: Array<{ timestamp?: string; message?: string } | string> }>(session, "GET", `/v1/templates/${t.id}/builds/${b.id}`);
    const text = r.logs.map((l) => (typeof l === "string" ? l : `${l.timestamp ?? ""} ${l.message ?? JSON.stringify(l)}`)).join("\n");
    setLogs({ title: `${t.name} build ${b.id}`, text: text || "No log lines." });
  };
  return (
    <Section title="Templates">
      <Loaded value={templates} error={error}>
        {(templates) => (
            <table aria-label="Templates">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">ID</th>
                  <th scope="col">Owner</th>
                  <th scope="col">Builds</th>
                </tr>
              </thead>
              <tbody>
                {templates.map((t) => (
                  <tr key={t.id}>
                    <td>{t.name}</td>
                    <td>{t.id}</td>
                    <td>
                      {t.owner}
                      {t.public ? ", public" : ""}
                    </td>
                    <td>
                      <ul class="plain">
                        {t.builds.slice(0, 5).map((b) => (
                          <li>
                            <span class={`state ${b.status}`}>{b.status}</span> {fmtTime(b.created_at)} {b.error ? `— ${b.error}` : ""}{" "}
                            <button type="button" onClick={() => showLogs(t, b).catch((e: Error) => setError(e.message))}>
                              Logs
                            </button>
                          </li>
                        ))}
                      </ul>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
        )}
      </Loaded>
      {logs ? (
        <Section title={`Logs: ${logs.title}`}>
          <pre class="logs" tabIndex={0}>
            {logs.text}
          </pre>
        </Section>
      ) : null}
    </Section>
  );
}

interface Operation {
  id: string;
  kind: string;
  state: string;
  target: string;
  queued_at: string;
  failure: { code: string; message: string } | null;
}

export function Operations({ session }: { session: Session }) {
  const [ops, setOps] = useState<Operation[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    call<{ operations: Operation[] }>(session, "GET", "/v1/operations?limit=100").then((r) => setOps(r.operations), (e: Error) => setError(e.message));
  }, [session]);
  return (
    <Section title="Operations">
      <Loaded value={ops} error={error}>
        {(ops) => (
            <table aria-label="Operations">
              <thead>
                <tr>
                  <th scope="col">Queued</th>
                  <th scope="col">Kind</th>
                  <th scope="col">Target</th>
                  <th scope="col">State</th>
                  <th scope="col">Failure</th>
                </tr>
              </thead>
              <tbody>
                {ops.map((o) => (
                  <tr key={o.id}>
                    <td>{fmtTime(o.queued_at)}</td>
                    <td>{o.kind}</td>
                    <td>{o.target}</td>
                    <td>
                      <span class={`state ${o.state}`}>{o.state}</span>
                    </td>
                    <td>{o.failure ? `${o.failure.code}: ${o.failure.message}` : ""}</td>
                  </tr>
                ))}
              </tbody>
            </table>
        )}
      </Loaded>
    </Section>
  );
}
