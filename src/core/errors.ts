/**
 * One error taxonomy for the whole system. Domain code throws `SpaceError` with a
 * code from this closed union (Connect's codes); the edges map it once to HTTP,
 * Connect and public-operation failure codes with the tables below.
 */
export const errorCodes = [
  /** The request itself is wrong (a field, a size, a path). Not retryable. */
  "invalid_argument",
  /** The named thing does not exist, or the caller may not know it exists. */
  "not_found",
  /** The thing to create already exists. */
  "already_exists",
  /** The state does not allow this now (e.g. pausing a paused sandbox). */
  "failed_precondition",
  /** A concurrent change won (generation or idempotency conflict). */
  "aborted",
  /** A quota or capacity is exhausted (disk, slots, memory). */
  "resource_exhausted",
  /** No credentials, or wrong ones. */
  "unauthenticated",
  /** Credentials are fine but lack the scope. */
  "permission_denied",
  /** Not built (yet); the message says what instead. */
  "unimplemented",
  /** A dependency is down or busy; retry later. */
  "unavailable",
  /** The deadline passed before the work finished. */
  "deadline_exceeded",
  /** The caller went away. */
  "canceled",
  /** A bug or an unclassified failure. */
  "internal",
] as const;
export type ErrorCode = (typeof errorCodes)[number];

/**
 * Finer codes under a taxonomy code, for the few refusals a caller must tell apart from
 * others of the same code: a closed list, so callers match a detail, never a message.
 */
export const errorDetails = [
  /** An idempotency key was used before with a different request (code `aborted`). */
  "idempotency_conflict",
  /** A tenant quota would be passed (code `resource_exhausted`; no Retry-After: waiting frees nothing by itself). */
  "quota_exceeded",
  /** A create rate limit was hit (code `resource_exhausted`; `details.retryAfterS` says when a token is back). */
  "rate_limited",
] as const;
export type ErrorDetail = (typeof errorDetails)[number];

export class SpaceError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  /** Which refusal under `code` this is, when a caller must tell it apart (see errorDetails). */
  readonly detail: ErrorDetail | undefined;
  /** Extra, safe-to-show fields (e.g. `{ field: "vcpu" }`). */
  readonly details: Record<string, unknown> | undefined;
  /**
   * Made by `from` out of an error outside the taxonomy (a database, a library, a bug):
   * its message is that error's own text, for the log only (see `publicMessage`).
   */
  readonly unclassified: boolean;

  constructor(
    code: ErrorCode,
    message: string,
    opts: { cause?: unknown; retryable?: boolean; detail?: ErrorDetail; details?: Record<string, unknown>; unclassified?: boolean } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "SpaceError";
    this.code = code;
    this.retryable = opts.retryable ?? (code === "unavailable" || code === "aborted");
    this.detail = opts.detail;
    this.details = opts.details;
    this.unclassified = opts.unclassified ?? false;
  }

  static from(e: unknown): SpaceError {
    if (e instanceof SpaceError) return e;
    if (isSpaceErrorLike(e)) return new SpaceError(e.code, e.message);
    if (e instanceof Error && e.name === "AbortError") return new SpaceError("canceled", e.message, { cause: e });
    const message = e instanceof Error ? e.message : String(e);
    return new SpaceError("internal", message, { cause: e, unclassified: true });
  }
}

/** What a client is told of an unclassified failure: never database or library text. */
export const INTERNAL_MESSAGE = "internal error; see the server log";

/** The message an edge may send: the error's own, unless it is unclassified. */
export const publicMessage = (e: SpaceError): string => (e.unclassified ? INTERNAL_MESSAGE : e.message);

function isSpaceErrorLike(e: unknown): e is { code: ErrorCode; message: string } {
  return (
    typeof e === "object" &&
    e !== null &&
    typeof (e as { code?: unknown }).code === "string" &&
    (errorCodes as readonly string[]).includes((e as { code: string }).code) &&
    typeof (e as { message?: unknown }).message === "string"
  );
}

export const invalid = (message: string, details?: Record<string, unknown>) =>
  new SpaceError("invalid_argument", message, { details });
export const notFound = (message: string) => new SpaceError("not_found", message);
export const conflict = (message: string) => new SpaceError("failed_precondition", message);
export const unavailable = (message: string, cause?: unknown) => new SpaceError("unavailable", message, { cause });
export const unimplemented = (message: string) => new SpaceError("unimplemented", message);
export const internal = (message: string, cause?: unknown) => new SpaceError("internal", message, { cause });
/** The idempotency key was used before with a different request (the existing row named in `details`). */
export const idempotencyConflict = (details: Record<string, unknown>) =>
  new SpaceError("aborted", "idempotency_conflict", { retryable: false, detail: "idempotency_conflict", details });

/** `e` is a SpaceError carrying `detail`. */
export const hasDetail = (e: unknown, detail: ErrorDetail): e is SpaceError => e instanceof SpaceError && e.detail === detail;

/** code → HTTP status, the one table every HTTP edge uses. */
export const httpStatus: Record<ErrorCode, number> = {
  invalid_argument: 400,
  not_found: 404,
  already_exists: 409,
  failed_precondition: 409,
  aborted: 409,
  resource_exhausted: 507,
  unauthenticated: 401,
  permission_denied: 403,
  unimplemented: 501,
  unavailable: 503,
  deadline_exceeded: 504,
  canceled: 499,
  internal: 500,
};

/**
 * The status the control-plane APIs (ECW, Native, Admin) answer: as `httpStatus`, except
 * `resource_exhausted` is 429, E2B's answer for quotas, rate limits and a full cluster
 * (the SDKs raise RateLimitError and retry after `Retry-After`). envd and node-api keep
 * 507 (E2B's envd answers a full disk with 507, which the SDK reads as NotEnoughSpaceError).
 */
export function apiHttpStatus(code: ErrorCode): number {
  return code === "resource_exhausted" ? 429 : httpStatus[code];
}

/**
 * The retry headers of a control-plane refusal: a rate limit says when its bucket refills
 * and a full cluster the configured wait (`Retry-After`, seconds: both SDKs sleep it and
 * retry); a quota says `Should-Retry: false` (waiting frees nothing by itself; the Python
 * SDK otherwise retries every 429 with backoff). Other errors: none.
 */
export function retryHeadersOf(e: SpaceError, capacityRetryAfterS: number): Record<string, string> {
  if (e.code !== "resource_exhausted") return {};
  if (e.detail === "quota_exceeded") return { "should-retry": "false" };
  const s = e.details?.["retryAfterS"];
  return { "retry-after": String(typeof s === "number" && s > 0 ? Math.ceil(s) : capacityRetryAfterS) };
}

/** Public-operation failure codes (behaviours.md A). */
export type OperationFailureCode =
  | "invalid_request"
  | "not_found"
  | "conflict"
  | "unavailable"
  | "deadline_exceeded"
  | "internal";

export function toOperationFailure(code: ErrorCode): OperationFailureCode {
  switch (code) {
    case "invalid_argument":
    case "unauthenticated":
    case "permission_denied":
      return "invalid_request";
    case "not_found":
      return "not_found";
    case "already_exists":
    case "failed_precondition":
    case "aborted":
      return "conflict";
    case "resource_exhausted":
    case "unavailable":
    case "canceled":
      return "unavailable";
    case "deadline_exceeded":
      return "deadline_exceeded";
    case "unimplemented":
    case "internal":
      return "internal";
    default:
      return assertNever(code);
  }
}

/** Back from a failure code to the taxonomy (for clients reading operations). */
export function fromHttpStatus(status: number): ErrorCode {
  for (const [code, s] of Object.entries(httpStatus)) if (s === status) return code as ErrorCode;
  if (status === 429) return "resource_exhausted";
  if (status >= 500) return "unavailable";
  return "internal";
}

export function assertNever(x: never): never {
  throw new Error(`unexpected value ${JSON.stringify(x)}`);
}
