// The SPACE dashboard: sign in with an API key (tenant view) or the admin token (operator
// view); every page calls the public APIs with that credential (docs/dashboard.md).
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, loadSession, saveSession, type Role, type Session } from "./api.ts";
import { ErrorLine, useRoute } from "./ui.tsx";
import { SandboxDetail, SandboxList } from "./pages/sandboxes.tsx";
import { Operations, Templates } from "./pages/tenant-more.tsx";
import { Nodes, Pools, Tenants } from "./pages/operator.tsx";
import { OwnKeys, TenantKeys } from "./pages/keys.tsx";
import { AdminOperations, PlacementCensus } from "./pages/operator-more.tsx";
import "./style.css";

function SignIn({ onSignIn }: { onSignIn: (s: Session) => void }) {
  const [role, setRole] = useState<Role>("tenant");
  const [secret, setSecret] = useState("");
  const [sandboxUrl, setSandboxUrl] = useState("");
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    fetch("/dashboard/config.json")
      .then((r) => r.json() as Promise<{ sandbox_url: string }>)
      .then((c) => setSandboxUrl((u) => u || c.sandbox_url), () => {});
  }, []);
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    const s: Session = { role, secret: secret.trim(), sandboxUrl: sandboxUrl.trim() };
    try {
      // One read the credential must pass: a wrong key is refused here, not on every page.
      await call(s, "GET", role === "tenant" ? "/v1/sandboxes?limit=1" : "/admin/api/v1/nodes");
      onSignIn(s);
    } catch (err) {
      setError(err instanceof ApiError && (err.status === 401 || err.status === 403) ? `Refused: ${err.message}` : (err as Error).message);
    }
  };
  return (
    <main class="signin">
      <h1>SPACE dashboard</h1>
      <form onSubmit={submit} aria-label="Sign in">
        <fieldset>
          <legend>Sign in as</legend>
          <label>
            <input type="radio" name="role" checked={role === "tenant"} onChange={() => setRole("tenant")} /> Tenant (API key)
          </label>
          <label>
            <input type="radio" name="role" checked={role === "operator"} onChange={() => setRole("operator")} /> Operator (admin token)
          </label>
        </fieldset>
        <label>
          {role === "tenant" ? "API key (E2B_API_KEY)" : "Admin token (SPACE_ADMIN_TOKEN)"}
          <input type="password" name="secret" autoComplete="off" required value={secret} onInput={(e) => setSecret(e.currentTarget.value)} />
        </label>
        <label>
          Sandbox URL (E2B_SANDBOX_URL)
          <input type="url" name="sandboxUrl" value={sandboxUrl} onInput={(e) => setSandboxUrl(e.currentTarget.value)} />
        </label>
        <ErrorLine error={error} />
        <button type="submit" class="primary">
          Sign in
        </button>
        <p class="hint">The credential stays in this tab (sessionStorage) and goes only to this API.</p>
      </form>
    </main>
  );
}

const TENANT_NAV = [
  ["#/sandboxes", "Sandboxes"],
  ["#/templates", "Templates"],
  ["#/operations", "Operations"],
  ["#/keys", "Keys and tokens"],
] as const;
const OPERATOR_NAV = [
  ["#/nodes", "Nodes"],
  ["#/pools", "Warm pools"],
  ["#/operations", "Operations"],
  ["#/census", "Placement census"],
  ["#/tenants", "Tenants"],
] as const;

function Page({ session, route }: { session: Session; route: string }) {
  const parts = route.split("/").filter(Boolean);
  if (session.role === "operator") {
    if (parts[0] === "pools") return <Pools session={session} />;
    if (parts[0] === "operations") return <AdminOperations session={session} />;
    if (parts[0] === "census") return <PlacementCensus session={session} />;
    if (parts[0] === "tenants" && parts[1]) return <TenantKeys session={session} id={parts[1]} />;
    if (parts[0] === "tenants") return <Tenants session={session} />;
    return <Nodes session={session} />;
  }
  if (parts[0] === "sandboxes" && parts[1]) return <SandboxDetail session={session} id={parts[1]} tab={parts[2] ?? "overview"} />;
  if (parts[0] === "templates") return <Templates session={session} />;
  if (parts[0] === "operations") return <Operations session={session} />;
  if (parts[0] === "keys") return <OwnKeys session={session} />;
  return <SandboxList session={session} />;
}

function App() {
  const [session, setSession] = useState<Session | null>(loadSession());
  const route = useRoute();
  if (!session)
    return (
      <SignIn
        onSignIn={(s) => {
          saveSession(s);
          setSession(s);
          location.hash = s.role === "tenant" ? "#/sandboxes" : "#/nodes";
        }}
      />
    );
  const nav = session.role === "tenant" ? TENANT_NAV : OPERATOR_NAV;
  const current = `#/${route.split("/").filter(Boolean)[0] ?? ""}`;
  return (
    <>
      <header>
        <strong>SPACE</strong> <span class="role">{session.role === "tenant" ? "tenant view" : "operator view"}</span>
        <nav aria-label="Main">
          {nav.map(([href, label]) => (
            <a href={href} aria-current={current === href ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <button
          type="button"
          onClick={() => {
            saveSession(null);
            setSession(null);
            location.hash = "";
          }}
        >
          Sign out
        </button>
      </header>
      <main>
        <Page session={session} route={route} />
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
