// envd, reached through the gateway (path form /sandboxes/<id>/ports/49983/…), the way the
// e2b SDK reaches it: the Connect protocol with the JSON codec for the process and
// filesystem services, and /files for upload and download. Hand-written rather than
// @connectrpc/connect-web because that package is not a direct dependency (only e2b's),
// and three calls of the protocol fit in a page: an enveloped request, enveloped events.

const ENVD_PORT = 49983;
// envd's default user, as the SDK sends it (Basic "<user>:").
const USER = "user";

export interface EnvdTarget {
  sandboxUrl: string;
  sandboxId: string;
  accessToken: string | undefined;
}

function base(t: EnvdTarget): string {
  return `${t.sandboxUrl.replace(/\/$/, "")}/sandboxes/${t.sandboxId}/ports/${ENVD_PORT}`;
}

function authHeaders(t: EnvdTarget): Record<string, string> {
  return { authorization: `Basic ${btoa(`${USER}:`)}`, ...(t.accessToken ? { "x-access-token": t.accessToken } : {}) };
}

export async function unary<T>(t: EnvdTarget, method: string, body: unknown): Promise<T> {
  const res = await fetch(`${base(t)}/${method}`, {
    method: "POST",
    headers: { ...authHeaders(t), "content-type": "application/json", "connect-protocol-version": "1" },
    body: JSON.stringify(body),
  });
  const parsed = (await res.json().catch(() => ({}))) as T & { message?: string; code?: string };
  if (!res.ok) throw new Error(`${method}: ${parsed.message ?? parsed.code ?? res.status}`);
  return parsed;
}

function envelope(msg: unknown): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(msg));
  const out = new Uint8Array(5 + json.length);
  new DataView(out.buffer).setUint32(1, json.length);
  out.set(json, 5);
  return out;
}

/** A server-streaming call: each message to `on`; resolves when the stream ends, rejects on its error. */
export async function stream(t: EnvdTarget, method: string, body: unknown, on: (msg: unknown) => void, signal: AbortSignal): Promise<void> {
  const res = await fetch(`${base(t)}/${method}`, {
    method: "POST",
    headers: { ...authHeaders(t), "content-type": "application/connect+json", "connect-protocol-version": "1", "keepalive-ping-interval": "50" },
    body: envelope(body) as BodyInit,
    signal,
  });
  if (!res.ok || !res.body) throw new Error(`${method}: ${res.status} ${await res.text().catch(() => "")}`);
  const reader = res.body.getReader();
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const next = new Uint8Array(buf.length + value.length);
    next.set(buf);
    next.set(value, buf.length);
    buf = next;
    while (buf.length >= 5) {
      const flags = buf[0]!;
      const len = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + len) break;
      const msg = JSON.parse(new TextDecoder().decode(buf.subarray(5, 5 + len))) as unknown;
      buf = buf.slice(5 + len);
      if (flags & 0x02) {
        const end = msg as { error?: { message?: string; code?: string } };
        if (end.error) throw new Error(`${method}: ${end.error.message ?? end.error.code}`);
        return;
      }
      on(msg);
    }
  }
}

const toB64 = (bytes: Uint8Array) => btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""));
const fromB64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

export interface Pty {
  pid: Promise<number>;
  write(data: string): Promise<void>;
  resize(cols: number, rows: number): Promise<void>;
  close(): void;
  done: Promise<void>;
}

/** A login shell on a PTY, as the SDK's `sandbox.pty.create` starts it. */
export function startPty(t: EnvdTarget, cols: number, rows: number, onData: (bytes: Uint8Array) => void): Pty {
  const stop = new AbortController();
  let resolvePid!: (pid: number) => void;
  let rejectPid!: (e: unknown) => void;
  const pid = new Promise<number>((res, rej) => ((resolvePid = res), (rejectPid = rej)));
  const request = {
    process: { cmd: "/bin/bash", args: ["-i", "-l"], envs: { TERM: "xterm-256color", LANG: "C.UTF-8", LC_ALL: "C.UTF-8" } },
    pty: { size: { cols, rows } },
  };
  const done = stream(
    t,
    "process.Process/Start",
    request,
    (m) => {
      const ev = (m as { event?: { start?: { pid: number }; data?: { pty?: string } } }).event;
      if (ev?.start) resolvePid(ev.start.pid);
      if (ev?.data?.pty) onData(fromB64(ev.data.pty));
    },
    stop.signal,
  ).catch((e: unknown) => {
    rejectPid(e);
    if (!stop.signal.aborted) throw e;
  });
  const enc = new TextEncoder();
  let pending = "";
  let flushing: Promise<void> | null = null;
  return {
    pid,
    done,
    write: (data) => {
      // In order, one call at a time: keystrokes sent concurrently arrive out of order.
      // What is typed while a call is out goes in the next one.
      pending += data;
      return (flushing ??= (async () => {
        try {
          while (pending) {
            const chunk = pending;
            pending = "";
            await unary(t, "process.Process/SendInput", { process: { pid: await pid }, input: { pty: toB64(enc.encode(chunk)) } });
          }
        } finally {
          flushing = null;
        }
      })());
    },
    resize: async (c, r) => void (await unary(t, "process.Process/Update", { process: { pid: await pid }, pty: { size: { cols: c, rows: r } } })),
    close: () => stop.abort(),
  };
}

export interface Entry {
  name: string;
  type: string;
  path: string;
  size: string | number;
  permissions: string;
}

export async function listDir(t: EnvdTarget, path: string): Promise<Entry[]> {
  const r = await unary<{ entries?: Entry[] }>(t, "filesystem.Filesystem/ListDir", { path, depth: 1 });
  return r.entries ?? [];
}

function filesUrl(t: EnvdTarget, path: string): string {
  return `${base(t)}/files?${new URLSearchParams({ path, username: USER })}`;
}

export async function upload(t: EnvdTarget, path: string, file: Blob): Promise<void> {
  const form = new FormData();
  form.append("file", file);
  const res = await fetch(filesUrl(t, path), { method: "POST", headers: authHeaders(t), body: form });
  if (!res.ok) throw new Error(`upload ${path}: ${res.status} ${await res.text().catch(() => "")}`);
}

export async function download(t: EnvdTarget, path: string): Promise<Blob> {
  const res = await fetch(filesUrl(t, path), { headers: authHeaders(t) });
  if (!res.ok) throw new Error(`download ${path}: ${res.status} ${await res.text().catch(() => "")}`);
  return res.blob();
}
