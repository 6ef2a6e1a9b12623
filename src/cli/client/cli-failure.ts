/**
 * How a failed `space` command ends: one line on stderr that names the fix, and an exit
 * code a script can branch on (docs/cli.md "Exit codes"). Stack traces only with --debug.
 */
import { SpaceError, type ErrorCode } from "../../core/errors.ts";

export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  notFound: 3,
  refused: 4,
  unreachable: 5,
  unauthorized: 6,
} as const;

/** The exit code of each taxonomy code (exhaustive: a new code must choose one). */
const exitOf = {
  invalid_argument: EXIT.usage,
  not_found: EXIT.notFound,
  already_exists: EXIT.refused,
  failed_precondition: EXIT.refused,
  aborted: EXIT.refused,
  resource_exhausted: EXIT.refused,
  unimplemented: EXIT.refused,
  unauthenticated: EXIT.unauthorized,
  permission_denied: EXIT.unauthorized,
  unavailable: EXIT.unreachable,
  deadline_exceeded: EXIT.error,
  canceled: EXIT.error,
  internal: EXIT.error,
} as const satisfies Record<ErrorCode, number>;

export interface Failure {
  line: string;
  exitCode: number;
}

/** Which variable sets a port, for EADDRINUSE (filled by the command that listens). */
export type PortVariables = Record<number, string[]>;

interface SystemError {
  code: string;
  path?: string;
  port?: number;
  address?: string;
  syscall?: string;
}

function systemError(e: unknown): SystemError | undefined {
  if (!(e instanceof Error)) return undefined;
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && /^E[A-Z]+$/.test(code) ? (e as unknown as SystemError) : undefined;
}

/** The one line and exit code for any error a command threw. */
export function describeFailure(e: unknown, ports: PortVariables = {}): Failure {
  if (e instanceof SpaceError) return { line: e.message, exitCode: exitOf[e.code] };
  const sys = systemError(e);
  if (sys) {
    switch (sys.code) {
      case "ENOENT":
        return { line: `no such file or directory: ${sys.path ?? "?"}`, exitCode: EXIT.notFound };
      case "EACCES":
      case "EPERM":
        return { line: `permission denied: ${sys.path ?? sys.syscall ?? "?"} (SPACE's processes run as root)`, exitCode: EXIT.unauthorized };
      case "EISDIR":
        return { line: `${sys.path ?? "the path"} is a directory: name a file`, exitCode: EXIT.usage };
      case "ENOTDIR":
        return { line: `not a directory: ${sys.path ?? "?"}`, exitCode: EXIT.usage };
      case "EADDRINUSE": {
        const vars = sys.port !== undefined ? ports[sys.port] : undefined;
        const fix = vars?.length ? `set ${vars.join(" or ")} to a free port` : "choose a free port";
        return { line: `port ${sys.port ?? "?"} on ${sys.address ?? "?"} is already in use (another \`space up\`?): ${fix}`, exitCode: EXIT.refused };
      }
    }
  }
  return { line: e instanceof Error ? e.message : String(e), exitCode: EXIT.error };
}
