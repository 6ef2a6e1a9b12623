// The dashboard's calls: the public APIs (Native /v1, ECW, Admin) with the credential the
// user signed in with, held in sessionStorage (gone with the tab), and the live streams.

export type Role = "tenant" | "operator";
export interface Session {
  role: Role;
  /** An API key (tenant) or the admin token (operator). */
  secret: string;
  /** The gateway (E2B_SANDBOX_URL): envd is reached there. */
  sandboxUrl: string;
}

const KEY = "space.dashboard.session";

export function loadSession(): Session | null {
  const raw = sessionStorage.getItem(KEY);
  return raw ? (JSON.parse(raw) as Session) : null;
}
export function saveSession(s: Session | null): void {
  if (s) sessionStorage.setItem(KEY, JSON.stringify(s));
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** ECW routes take the key in X-API-KEY; Native and Admin take a bearer. */
function headersFor(s: Session, path: string): Record<string, string> {
  const ecw = !path.startsWith("/v1/") && !path.startsWith("/admin/");
  return ecw ? { "x-api-key": s.secret } : { authorization: `Bearer ${s.secret}` };
}

export async function call<T>(s: Session, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: { ...headersFor(s, path), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  const parsed: unknown = text ? safeJson(text) : undefined;
  if (!res.ok) {
    const msg = (parsed as { message?: string } | undefined)?.message ?? `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, msg);
  }
  return parsed as T;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { message: text };
  }
}

/**
 * Reads a server-sent-event stream with fetch (the credential goes in a header, which
 * EventSource cannot send) and calls `on` with each event's parsed data. Reconnects after
 * a drop, backing off; returns the stop.
 */
export function live<T>(s: Session, path: string, event: string, on: (data: T) => void, onError: (message: string) => void): () => void {
  const stop = new AbortController();
  let delay = 1000;
  const run = async () => {
    while (!stop.signal.aborted) {
      try {
        const res = await fetch(path, { headers: headersFor(s, path), signal: stop.signal });
        if (!res.ok || !res.body) {
          const body = (await res.json().catch(() => ({}))) as { message?: string };
          onError(body.message ?? `${res.status}`);
          if (res.status === 401 || res.status === 403) return;
        } else {
          delay = 1000;
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            let cut: number;
            while ((cut = buf.indexOf("\n\n")) >= 0) {
              const block = buf.slice(0, cut);
              buf = buf.slice(cut + 2);
              const name = /^event: (.*)$/m.exec(block)?.[1];
              const data = block
                .split("\n")
                .filter((l) => l.startsWith("data: "))
                .map((l) => l.slice(6))
                .join("\n");
              if (name === event) on(JSON.parse(data) as T);
              else if (name === "error") onError((JSON.parse(data) as { message: string }).message);
            }
          }
        }
      } catch (e) {
        if (stop.signal.aborted) return;
        onError(String(e));
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15_000);
    }
  };
  void run();
  return () => stop.abort();
}

// Wire shapes the pages read (Native /v1 and Admin; see docs/dashboard.md).
export interface Sandbox {
  id: string;
  state: string;
  template: string;
  alias: string | null;
  vcpu: number;
  memory_mib: number;
  disk_mib: number;
  metadata: Record<string, string>;
  node_id: string | null;
  created_at: string;
  started_at: string;
  end_at: string;
  reason: string | null;
}
export interface FleetNode {
  id: string;
  name: string;
  address: string;
  node_group: string;
  status: string;
  drain_mode: string | null;
  status_reason: string | null;
  capacity: Record<string, number>;
  used: Record<string, number>;
  resident_sandboxes: number;
  last_heartbeat_at: string;
  version: string;
}
export interface WarmPool {
  template: string;
  tenant_id: string | null;
  size: number;
  idle_policy: string;
  status: Record<string, unknown> | null;
}
