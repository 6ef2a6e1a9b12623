/**
 * The client commands' HTTP calls, over the APIs a user has: ECW (`X-API-KEY`), Native
 * `/v1` (the API key as bearer) and Admin `/admin/api/v1` (the admin token). Every failure
 * becomes a `SpaceError` with one line that names the fix: an unreachable API names its URL
 * and how to set it, a missing credential the flag and variable, a refusal the API's own
 * message (its `reason` is the taxonomy code, so the exit code follows it).
 */
import { SpaceError, errorCodes, fromHttpStatus, type ErrorCode } from "../../core/errors.ts";
import type { Connection } from "./connection.ts";

export type Surface = "ecw" | "native" | "admin";
export type Query = Record<string, string | number | boolean | undefined>;

export interface CallOptions {
  query?: Query;
  /** Answers that are not an error (e.g. 404 from a lookup that may miss). */
  allow?: number[];
}

export interface Answer<T> {
  status: number;
  body: T;
  headers: Headers;
}

const isErrorCode = (v: unknown): v is ErrorCode => typeof v === "string" && (errorCodes as readonly string[]).includes(v);

export function unreachable(url: string, cause?: unknown): SpaceError {
  const why = cause instanceof Error && cause.cause instanceof Error ? ` (${cause.cause.message})` : "";
  return new SpaceError("unavailable", `cannot reach the SPACE API at ${url}${why}: is \`space up\` running? set SPACE_API_URL or --api-url`, { cause });
}

export class ApiClient {
  readonly conn: Connection;

  constructor(conn: Connection) {
    this.conn = conn;
  }

  get apiUrl(): string {
    return this.conn.apiUrl.value.replace(/\/+$/, "");
  }

  /** The API key, or a one-line refusal naming where to get one. */
  apiKey(): string {
    const k = this.conn.apiKey.value;
    if (!k) throw new SpaceError("unauthenticated", `no API key: set E2B_API_KEY or --api-key (\`space up\` prints it; it also keeps it in ${this.conn.dataDir}/secrets.json)`);
    return k;
  }

  adminToken(): string {
    const t = this.conn.adminToken.value;
    if (!t) throw new SpaceError("unauthenticated", `no admin token: set SPACE_ADMIN_TOKEN or --admin-token (\`space up\` prints it; it also keeps it in ${this.conn.dataDir}/secrets.json)`);
    return t;
  }

  private headers(surface: Surface): Record<string, string> {
    switch (surface) {
      case "ecw":
        return { "x-api-key": this.apiKey() };
      case "native":
        return { authorization: `Bearer ${this.apiKey()}` };
      case "admin":
        return { authorization: `Bearer ${this.adminToken()}` };
    }
  }

  async call<T>(surface: Surface, method: string, path: string, body?: unknown, o: CallOptions = {}): Promise<Answer<T>> {
    const qs = Object.entries(o.query ?? {})
      .filter((e): e is [string, string | number | boolean] => e[1] !== undefined)
      .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
      .join("&");
    const url = `${this.apiUrl}${path}${qs ? `?${qs}` : ""}`;
    const credentials = this.headers(surface);
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: { ...credentials, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (e: unknown) {
      throw unreachable(this.apiUrl, e);
    }
    const text = await res.text();
    let parsed: unknown = undefined;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    if (!res.ok && !(o.allow ?? []).includes(res.status)) throw refusal(res.status, parsed, surface, this.apiUrl);
    return { status: res.status, body: parsed as T, headers: res.headers };
  }

  async ecw<T>(method: string, path: string, body?: unknown, o?: CallOptions): Promise<T> {
    return (await this.call<T>("ecw", method, path, body, o)).body;
  }

  async native<T>(method: string, path: string, body?: unknown, o?: CallOptions): Promise<T> {
    return (await this.call<T>("native", method, path, body, o)).body;
  }

  async admin<T>(method: string, path: string, body?: unknown, o?: CallOptions): Promise<T> {
    return (await this.call<T>("admin", method, `/admin/api/v1${path}`, body, o)).body;
  }
}

function refusal(status: number, body: unknown, surface: Surface, apiUrl: string): SpaceError {
  const b = (typeof body === "object" && body !== null ? body : {}) as { message?: unknown; reason?: unknown };
  const message = typeof b.message === "string" ? b.message : typeof body === "string" && body ? body.slice(0, 300) : `HTTP ${status}`;
  const code = isErrorCode(b.reason) ? b.reason : fromHttpStatus(status);
  if (status === 401) {
    const which = surface === "admin" ? "admin token (SPACE_ADMIN_TOKEN, --admin-token)" : "API key (E2B_API_KEY, --api-key)";
    return new SpaceError("unauthenticated", `${apiUrl} refused the ${which}: ${message}`);
  }
  return new SpaceError(code, message);
}
