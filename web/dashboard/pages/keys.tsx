// Keys and tokens, one component for both views with the API calls passed in: the tenant's
// own (Native /v1/api-keys and /v1/tokens, with the signed-in API key) and, for the
// operator, any tenant's (Admin /admin/api/v1/tenants/:id/{keys,tokens}, reached from the
// tenants list). Lists show the stored prefix only; a new secret is shown once, right
// after creation, as the API returns it only then.
import { useEffect, useMemo, useState } from "preact/hooks";
import { call, type Session } from "../api.ts";
import { Confirm, ErrorLine, Section, fmtTime } from "../ui.tsx";

interface Credential {
  id: string;
  name: string;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  /** Tokens only. */
  scopes?: string[];
  expiresAt?: string | null;
}
type Kind = "keys" | "tokens";

/** How one view lists, creates and revokes credentials (the Admin API's or the tenant's own). */
interface CredentialApi {
  list(kind: Kind): Promise<Credential[]>;
  /** The credential made and its secret (in this answer only). */
  create(kind: Kind, body: Record<string, unknown>): Promise<{ credential: Credential; secret: string }>;
  revoke(kind: Kind, id: string): Promise<void>;
}

/** The token scopes a tenant may hold (src/api/auth.ts tenantScopes). */
const SCOPES = ["sandboxes:read", "sandboxes:write", "commands:exec", "templates:read", "templates:write", "volumes:read", "volumes:write", "credentials:read", "credentials:write"] as const;

/** The Admin API answers with the store's rows (camelCase). */
function adminCredentials(session: Session, tenant: string): CredentialApi {
  const base = (kind: Kind) => `/admin/api/v1/tenants/${tenant}/${kind}`;
  return {
    list: (kind) => call<Record<Kind, Credential[]>>(session, "GET", base(kind)).then((r) => r[kind]),
    create: async (kind, body) => {
      const made = await call<Credential & { key?: string; token?: string }>(session, "POST", base(kind), body);
      return { credential: made, secret: made.key ?? made.token ?? "" };
    },
    revoke: (kind, id) => call<void>(session, "DELETE", `${base(kind)}/${id}`),
  };
}

/** Native's wire objects (snake_case), as in src/api/native/native-schemas.ts ApiKey and Token. */
interface NativeCredential {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  scopes?: string[];
  expires_at?: string | null;
}
const fromNative = (c: NativeCredential): Credential => ({
  id: c.id,
  name: c.name,
  prefix: c.prefix,
  createdAt: c.created_at,
  lastUsedAt: c.last_used_at,
  revokedAt: c.revoked_at,
  ...(c.scopes ? { scopes: c.scopes } : {}),
  ...(c.expires_at !== undefined ? { expiresAt: c.expires_at } : {}),
});

/** The signed-in tenant's own, through the Native API. */
function ownCredentials(session: Session): CredentialApi {
  const base = (kind: Kind) => (kind === "keys" ? "/v1/api-keys" : "/v1/tokens");
  return {
    list: (kind) => call<{ api_keys?: NativeCredential[]; tokens?: NativeCredential[] }>(session, "GET", base(kind)).then((r) => (r.api_keys ?? r.tokens ?? []).map(fromNative)),
    create: async (kind, body) => {
      const made = await call<NativeCredential & { key?: string; token?: string }>(session, "POST", base(kind), body);
      return { credential: fromNative(made), secret: made.key ?? made.token ?? "" };
    },
    revoke: (kind, id) => call<void>(session, "DELETE", `${base(kind)}/${id}`),
  };
}

/** Operator view: one tenant's keys and tokens. */
export function TenantKeys({ session, id }: { session: Session; id: string }) {
  const [name, setName] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const api = useMemo(() => adminCredentials(session, id), [session, id]);
  useEffect(() => {
    call<{ name: string }>(session, "GET", `/admin/api/v1/tenants/${id}`).then((t) => setName(t.name), (e: Error) => setError(e.message));
  }, [session, id]);
  return (
    <Section title={`Keys and tokens of ${name ?? id}`}>
      <p>
        <a href="#/tenants">Back to tenants</a>
      </p>
      <ErrorLine error={error} />
      <CredentialList api={api} kind="keys" />
      <CredentialList api={api} kind="tokens" />
    </Section>
  );
}

/** Tenant view: the signed-in tenant's own keys and tokens. */
export function OwnKeys({ session }: { session: Session }) {
  const api = useMemo(() => ownCredentials(session), [session]);
  return (
    <Section title="Keys and tokens">
      <p class="hint">Revoking the key you signed in with refuses this page's next request too: sign in again with another.</p>
      <CredentialList api={api} kind="keys" />
      <CredentialList api={api} kind="tokens" />
    </Section>
  );
}

function CredentialList({ api, kind }: { api: CredentialApi; kind: Kind }) {
  const title = kind === "keys" ? "API keys" : "Access tokens";
  const [items, setItems] = useState<Credential[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [secret, setSecret] = useState<{ name: string; value: string } | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    api.list(kind).then(setItems, (e: Error) => setError(e.message));
  }, [api, kind, tick]);
  const create = async (body: Record<string, unknown>) => {
    setError(null);
    const { credential, secret } = await api.create(kind, body);
    setSecret({ name: credential.name || credential.prefix, value: secret });
    setTick((t) => t + 1);
  };
  return (
    <Section title={title}>
      <ErrorLine error={error} />
      {secret ? (
        <div role="status" class="secret">
          <p>
            New {kind === "keys" ? "API key" : "token"} <strong>{secret.name}</strong>. Copy it now: it is not shown again.
          </p>
          <label>
            Secret
            <input readOnly value={secret.value} size={secret.value.length} aria-label={`New secret for ${secret.name}`} onFocus={(e) => e.currentTarget.select()} />
          </label>
          <button type="button" onClick={() => setSecret(null)}>
            Done
          </button>
        </div>
      ) : null}
      {kind === "keys" ? <KeyForm onCreate={create} /> : <TokenForm onCreate={create} />}
      {items === null ? (
        <p aria-busy="true">Loading…</p>
      ) : (
        <table aria-label={title}>
          <caption>
            {items.filter((c) => !c.revokedAt).length} live, {items.filter((c) => c.revokedAt).length} revoked
          </caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Prefix</th>
              {kind === "tokens" ? <th scope="col">Scopes</th> : null}
              <th scope="col">Created</th>
              <th scope="col">Last used</th>
              {kind === "tokens" ? <th scope="col">Expires</th> : null}
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {items.map((c) => (
              <tr key={c.id} data-credential={c.id} data-prefix={c.prefix}>
                <td title={c.id}>{c.name || "—"}</td>
                <td>
                  <code>{c.prefix}…</code>
                </td>
                {kind === "tokens" ? <td>{(c.scopes ?? []).join(", ")}</td> : null}
                <td>{fmtTime(c.createdAt)}</td>
                <td>{fmtTime(c.lastUsedAt)}</td>
                {kind === "tokens" ? <td>{c.expiresAt ? fmtTime(c.expiresAt) : "never"}</td> : null}
                <td>
                  {c.revokedAt ? (
                    <span class="state revoked">revoked {fmtTime(c.revokedAt)}</span>
                  ) : (
                    <Confirm
                      label="Revoke"
                      danger
                      question={`Revoke ${c.name || c.prefix} (${c.prefix}…)? Requests with it are refused from now on.`}
                      onConfirm={() => api.revoke(kind, c.id).then(() => setTick((t) => t + 1))}
                    />
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

function KeyForm({ onCreate }: { onCreate: (body: Record<string, unknown>) => Promise<void> }) {
  const [name, setName] = useState("");
  const [error, setError] = useState<string | null>(null);
  return (
    <form
      class="inline"
      aria-label="Create an API key"
      onSubmit={(e) => {
        e.preventDefault();
        setError(null);
        onCreate(name ? { name } : {}).then(() => setName(""), (err: Error) => setError(err.message));
      }}
    >
      <label>
        Key name
        <input value={name} maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />
      </label>
      <button type="submit" class="primary">
        Create API key
      </button>
      <ErrorLine error={error} />
    </form>
  );
}

function TokenForm({ onCreate }: { onCreate: (body: Record<string, unknown>) => Promise<void> }) {
  const [name, setName] = useState("");
  const [scopes, setScopes] = useState<Set<string>>(new Set(["sandboxes:read"]));
  const [days, setDays] = useState("");
  const [error, setError] = useState<string | null>(null);
  const toggle = (s: string) => setScopes((cur) => (cur.has(s) ? new Set([...cur].filter((x) => x !== s)) : new Set([...cur, s])));
  return (
    <form
      class="inline"
      aria-label="Create an access token"
      onSubmit={(e) => {
        e.preventDefault();
        setError(null);
        const body = { ...(name && { name }), scopes: [...scopes], ...(days && { expires_in_s: Math.round(Number(days) * 86_400) }) };
        onCreate(body).then(() => setName(""), (err: Error) => setError(err.message));
      }}
    >
      <label>
        Token name
        <input value={name} maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />
      </label>
      <fieldset class="scopes">
        <legend>Scopes</legend>
        {SCOPES.map((s) => (
          <label>
            <input type="checkbox" checked={scopes.has(s)} onChange={() => toggle(s)} /> {s}
          </label>
        ))}
      </fieldset>
      <label>
        Expires in (days, empty = never)
        <input type="number" min="1" max="3650" value={days} size={5} onInput={(e) => setDays(e.currentTarget.value)} />
      </label>
      <button type="submit" class="primary" disabled={scopes.size === 0}>
        Create token
      </button>
      <ErrorLine error={error} />
    </form>
  );
}
