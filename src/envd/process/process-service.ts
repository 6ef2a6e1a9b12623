/**
 * process.Process (e2b-wire.md §3). Streams send `start` first, then output, then
 * `end`; keepalives when idle for `Keepalive-Ping-Interval` seconds. At the request's
 * `Connect-Timeout-Ms` a stream ends with `deadline_exceeded`, as E2B's envd ends it (the
 * SDKs raise their TimeoutError); Start also kills the process then.
 */
import { existsSync } from "node:fs";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { SpaceError } from "../../core/errors.ts";
import { Process, Signal, type ProcessSelector, type ProcessEventSchema } from "../../gen/process/process_pb.ts";
import { userFromHeaders, type Envd } from "../context.ts";
import { resolveUserPath } from "../paths.ts";
import type { ManagedProcess, ProcEvent, Subscriber } from "./manager.ts";

/** Keepalive when the client asks for none (seconds). */
const DEFAULT_KEEPALIVE_S = 50;

type EventInit = MessageInitShape<typeof ProcessEventSchema>;

export function keepaliveMs(ctx: HandlerContext): number {
  const v = Number(ctx.requestHeader.get("keepalive-ping-interval"));
  return (Number.isFinite(v) && v > 0 ? v : DEFAULT_KEEPALIVE_S) * 1000;
}

/**
 * Call when a stream stops because its signal fired: past the request's deadline the
 * stream must end with that error, not cleanly (a clean end without `end` leaves the
 * SDKs with "exited without a result"). A client that went away needs nothing.
 */
export function throwIfDeadline(ctx: HandlerContext): void {
  const reason: unknown = ctx.signal.reason;
  if (ctx.signal.aborted && reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) throw reason;
}

function selector(sel: ProcessSelector | undefined): { pid?: number; tag?: string } {
  switch (sel?.selector.case) {
    case "pid":
      return { pid: sel.selector.value };
    case "tag":
      return { tag: sel.selector.value };
    default:
      throw new SpaceError("invalid_argument", "process selector needs a pid or a tag");
  }
}

function toEvent(ev: ProcEvent): EventInit {
  switch (ev.kind) {
    case "data":
      return { event: { case: "data", value: { output: { case: ev.stream, value: ev.data } } } };
    case "end":
      return {
        event: {
          case: "end",
          value: { exitCode: ev.end.exitCode, exited: ev.end.exited, status: ev.end.status, error: ev.end.error },
        },
      };
    case "keepalive":
      return { event: { case: "keepalive", value: {} } };
  }
}

async function* stream(proc: ManagedProcess, sub: Subscriber, ctx: HandlerContext) {
  yield { event: { event: { case: "start", value: { pid: proc.pid } } } as EventInit };
  for await (const ev of sub.events(ctx.signal, keepaliveMs(ctx))) {
    yield { event: toEvent(ev) };
    if (ev.kind === "end") return;
  }
  throwIfDeadline(ctx);
}

export function processService(envd: Envd): Partial<ServiceImpl<typeof Process>> {
  return {
    async *start(req, ctx) {
      const user = userFromHeaders(envd, ctx.requestHeader.get("authorization"));
      const cfg = req.process;
      if (!cfg || !cfg.cmd) throw new SpaceError("invalid_argument", "process.cmd is required");
      let cwd: string;
      if (cfg.cwd) cwd = resolveUserPath(cfg.cwd, user);
      else {
        const preferred = envd.state.defaultWorkdir ?? user.home;
        cwd = existsSync(preferred) ? preferred : "/";
      }
      const env: Record<string, string> = {
        PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ...envd.state.envVars,
        HOME: user.home,
        USER: user.name,
        LOGNAME: user.name,
        ...cfg.envs,
      };
      const timeoutMs = Number(ctx.requestHeader.get("connect-timeout-ms")) || undefined;
      const { proc, sub } = await envd.processes.start({
        config: { cmd: cfg.cmd, args: [...cfg.args], envs: { ...cfg.envs }, cwd: cfg.cwd },
        user,
        cwd,
        env,
        tag: req.tag,
        // Unset = open (SDKs before envd 0.3.0 never sent it); the JS SDK sends false.
        stdin: req.stdin ?? true,
        pty: req.pty ? { cols: req.pty.size?.cols ?? 80, rows: req.pty.size?.rows ?? 24 } : undefined,
        timeoutMs,
      });
      envd.log("process started", { logger: "processSvc", pid: proc.pid, cmd: cfg.cmd, args: cfg.args.join(" "), user: user.name, tag: req.tag });
      yield* stream(proc, sub, ctx);
    },

    async *connect(req, ctx) {
      const proc = envd.processes.get(selector(req.process));
      yield* stream(proc, proc.subscribe(), ctx);
    },

    async list() {
      return {
        processes: envd.processes.list().map((p) => ({
          pid: p.pid,
          tag: p.tag,
          config: { cmd: p.config.cmd, args: p.config.args, envs: p.config.envs, cwd: p.config.cwd },
        })),
      };
    },

    async sendInput(req) {
      const proc = envd.processes.get(selector(req.process));
      const input = req.input?.input;
      if (input?.case === "stdin" || input?.case === "pty") proc.sendInput(input.value, input.case);
      return {};
    },

    async streamInput(reqs) {
      let proc: ManagedProcess | undefined;
      for await (const r of reqs) {
        switch (r.event.case) {
          case "start":
            proc = envd.processes.get(selector(r.event.value.process));
            break;
          case "data": {
            if (!proc) throw new SpaceError("invalid_argument", "StreamInput needs a start event first");
            const input = r.event.value.input?.input;
            if (input?.case === "stdin" || input?.case === "pty") proc.sendInput(input.value, input.case);
            break;
          }
          default:
            break;
        }
      }
      return {};
    },

    async closeStdin(req) {
      envd.processes.get(selector(req.process)).closeStdin();
      return {};
    },

    async sendSignal(req) {
      const proc = envd.processes.get(selector(req.process));
      switch (req.signal) {
        case Signal.SIGKILL:
          proc.signal("SIGKILL");
          break;
        case Signal.SIGTERM:
          proc.signal("SIGTERM");
          break;
        default:
          throw new SpaceError("invalid_argument", `unsupported signal ${req.signal}`);
      }
      return {};
    },

    async update(req) {
      const proc = envd.processes.get(selector(req.process));
      if (req.pty?.size) proc.resize(req.pty.size.cols, req.pty.size.rows);
      return {};
    },
  };
}
