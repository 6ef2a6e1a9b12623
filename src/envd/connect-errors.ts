import { Code, ConnectError } from "@connectrpc/connect";
import { SpaceError, assertNever, type ErrorCode } from "../core/errors.ts";

/** The one SpaceError → Connect mapping for envd's RPC edge. */
export function toConnectCode(code: ErrorCode): Code {
  switch (code) {
    case "invalid_argument":
      return Code.InvalidArgument;
    case "not_found":
      return Code.NotFound;
    case "already_exists":
      return Code.AlreadyExists;
    case "failed_precondition":
      return Code.FailedPrecondition;
    case "aborted":
      return Code.Aborted;
    case "resource_exhausted":
      return Code.ResourceExhausted;
    case "unauthenticated":
      return Code.Unauthenticated;
    case "permission_denied":
      return Code.PermissionDenied;
    case "unimplemented":
      return Code.Unimplemented;
    case "unavailable":
      return Code.Unavailable;
    case "deadline_exceeded":
      return Code.DeadlineExceeded;
    case "canceled":
      return Code.Canceled;
    case "internal":
      return Code.Internal;
    default:
      return assertNever(code);
  }
}

export function toConnectError(e: unknown): ConnectError {
  if (e instanceof ConnectError) return e;
  const se = SpaceError.from(fsError(e));
  return new ConnectError(se.message, toConnectCode(se.code), undefined, undefined, e);
}

/** Node fs errors → the taxonomy, naming the path. */
export function fsError(e: unknown): unknown {
  if (e instanceof SpaceError || !(e instanceof Error)) return e;
  const err = e as NodeJS.ErrnoException;
  const what = err.path ? ` ${JSON.stringify(err.path)}` : "";
  switch (err.code) {
    case "ENOENT":
      return new SpaceError("not_found", `path${what} does not exist`, { cause: e });
    case "EEXIST":
      return new SpaceError("already_exists", `path${what} already exists`, { cause: e });
    case "ENOTDIR":
      return new SpaceError("invalid_argument", `path${what} is not a directory`, { cause: e });
    case "EISDIR":
      return new SpaceError("invalid_argument", `path${what} is a directory`, { cause: e });
    case "EACCES":
    case "EPERM":
      return new SpaceError("permission_denied", `permission denied for${what}`, { cause: e });
    case "ENOSPC":
    case "EDQUOT":
      return new SpaceError("resource_exhausted", `not enough disk space${what ? ` for${what}` : ""}`, { cause: e });
    case "ENOTEMPTY":
      return new SpaceError("failed_precondition", `directory${what} is not empty`, { cause: e });
    case "E2BIG":
      // exec refused the argv + environment: a request too big, never a server fault.
      return new SpaceError("invalid_argument", "the command's arguments and environment are too long to exec (E2BIG: at most 128 KiB per argument or variable, about 2 MiB in all)", { cause: e });
    case "ERR_INVALID_ARG_VALUE":
      // Node refuses a NUL byte in a path, cwd or variable before any syscall.
      return new SpaceError("invalid_argument", /null bytes/.test(err.message) ? "a path, directory or variable must not contain NUL bytes" : "invalid argument", { cause: e });
    case "Z_DATA_ERROR":
    case "Z_BUF_ERROR":
      // A body sent as gzip that is not (or is cut short).
      return new SpaceError("invalid_argument", `the request body is not valid gzip (${err.message})`, { cause: e });
    case "EINVAL":
    case "ELOOP":
    case "ENAMETOOLONG":
      return new SpaceError("invalid_argument", `${err.message}`, { cause: e });
    default:
      return e;
  }
}
