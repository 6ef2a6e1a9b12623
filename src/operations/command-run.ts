/**
 * `command.run`: runs a command in a sandbox through envd (Process/Start through the
 * node's proxy), stores its output as chunks and its exit code on the command row.
 *
 * The operation succeeds when the command ran to its end, whatever its exit code (the
 * code is in the result and on the command); it fails when the command could not run
 * (bad cmd/cwd/user → invalid_request with envd's reason), was cancelled (conflict), or
 * passed its `timeout_s` (deadline_exceeded, the process is killed).
 *
 * Survives a broken stream (data plane restart): the process keeps running in the
 * sandbox; the handler reattaches by pid (Process/Connect) with backoff. A re-run after
 * the claimer died reattaches the same way, by pid or by the command's tag, so a
 * command never starts twice. A command that ended while no stream was attached is
 * finished from envd's record of ended tagged processes: its exit code and the last
 * 64 KiB it wrote while detached (older detached output is lost, and so is output a
 * still-running process wrote while detached: Connect streams live output only).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { SpaceError, notFound } from "../core/errors.ts";
import type { SandboxId } from "../core/ids.ts";
import type { Logger } from "../core/log.ts";
import { ENVD_PORT } from "../contract/node-api.ts";
import type { ProcessEvent_EndEvent } from "../gen/process/process_pb.ts";
import { Signal } from "../gen/process/process_pb.ts";
import type { Db } from "../store/db.ts";
import type { OperationHandler } from "./handler.ts";
import type { HandlerDeps } from "./operation-handlers.ts";
import {
  appendCommandOutput,
  finishCommand,
  finishedCommandStates,
  getCommand,
  markCommandRunning,
  type Command as CommandRow,
} from "../store/commands.ts";
import type { EndedProcess } from "../contract/ended-process.ts";
import { endedProcess, fromConnectError, processClient, type ProcessClient } from "./envd-process-client.ts";
import { readRequest } from "./operation-kind.ts";
import { parseTarget } from "./requests.ts";
import { toCommandOutcome } from "./results.ts";

/** NOTIFY channel: payload = command id that got output or ended (followers wake at once). */
export const COMMAND_OUTPUT_CHANNEL = "space_command_output";

export const DEFAULT_COMMAND_TIMEOUT_S = 3600;
const FLUSH_BYTES = 64 * 1024;
const FLUSH_MS = 15;

type Stream = "stdout" | "stderr" | "pty";
type End = Pick<ProcessEvent_EndEvent, "exitCode" | "exited" | "status" | "error">;

/** Coalesces output events into chunks and appends them in order, one write at a time. */
export class OutputSink {
  #buf: { stream: Stream; parts: Uint8Array[]; bytes: number } | undefined;
  #timer: NodeJS.Timeout | undefined;
  #tail: Promise<void> = Promise.resolve();
  #error: unknown;

  constructor(
    private readonly db: Db,
    private readonly commandId: string,
  ) {}

  push(stream: Stream, data: Uint8Array): void {
    if (data.byteLength === 0) return;
    if (this.#buf && this.#buf.stream !== stream) this.#cut();
    this.#buf ??= { stream, parts: [], bytes: 0 };
    this.#buf.parts.push(data);
    this.#buf.bytes += data.byteLength;
    if (this.#buf.bytes >= FLUSH_BYTES) this.#cut();
    else this.#timer ??= setTimeout(() => this.#cut(), FLUSH_MS);
  }

  #cut(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    const b = this.#buf;
    this.#buf = undefined;
    if (!b) return;
    const data = b.parts.length === 1 ? b.parts[0]! : Buffer.concat(b.parts);
    this.#tail = this.#tail
      .then(async () => {
        await appendCommandOutput(this.db, this.commandId, b.stream, data);
        await this.db.notify(COMMAND_OUTPUT_CHANNEL, this.commandId);
      })
      .catch((e: unknown) => {
      this.#error ??= e;
    });
  }

  async flush(): Promise<void> {
    this.#cut();
    await this.#tail;
    if (this.#error) throw SpaceError.from(this.#error);
  }
}

export function commandRun(deps: HandlerDeps): OperationHandler {
  const { db, sandboxes: svc } = deps;
  return async ({ op, signal, log }) => {
    readRequest("command.run", op.request);
    const { sandboxId, commandId } = parseTarget(op.targetId);
    if (!commandId) throw new SpaceError("internal", `command.run operation ${op.id} has no command in its target`);
    const cmd = await getCommand(db, commandId, sandboxId);
    if (cmd.state === "killed" && cmd.pid === null) throw new SpaceError("failed_precondition", `command ${cmd.id} was cancelled before it started`);
    if (finishedCommandStates.includes(cmd.state)) return outcome(cmd);

    const sb = await svc.repo.getById(cmd.sandboxId as SandboxId);
    if (!sb || sb.tenantId !== op.tenantId) throw notFound(`sandbox ${cmd.sandboxId} not found`);
    if (sb.state !== "running" || !sb.nodeId) {
      throw new SpaceError(
        sb.state === "killed" || sb.state === "failed" ? "not_found" : "failed_precondition",
        `sandbox ${sb.id} is ${sb.state}; commands run only in a running sandbox`,
      );
    }
    const ref = { sandboxId: sb.id, nodeId: sb.nodeId };
    const target = () => svc.substrate.proxyTarget(ref, ENVD_PORT, signal);
    const auth = { accessToken: sb.envdAccessToken, user: cmd.cmd.user };
    const connect = async () => processClient(await target(), auth);
    const record = async (s: AbortSignal) => endedProcess(await target(), auth, cmd.id, s);
    let client = await connect();

    const timeoutS = typeof cmd.cmd.timeout_s === "number" ? cmd.cmd.timeout_s : DEFAULT_COMMAND_TIMEOUT_S;
    const startedMs = cmd.startedAt?.getTime() ?? Date.now();
    const sink = new OutputSink(db, cmd.id);
    const run = new CommandRun(client, record, cmd, sink, db, log, op.claimCount > 1);
    const timer = setTimeout(() => void run.kill("timeout"), Math.max(0, startedMs + timeoutS * 1000 - Date.now()));
    try {
      let attempt = 0;
      for (;;) {
        try {
          const end = await run.stream(signal);
          await sink.flush();
          return await finish(db, cmd.id, end, run.killedFor, timeoutS);
        } catch (e: unknown) {
          if (signal.aborted || (e instanceof SpaceError && e.code === "failed_precondition")) throw e;
          const err = fromConnectError(e, `command ${cmd.id}`);
          if (err.code === "not_found") {
            // Gone from envd's table: it may have ended while no stream was attached.
            const end = await run.endedWhileDetached(signal).catch(() => undefined);
            if (end) {
              await sink.flush();
              return await finish(db, cmd.id, end, run.killedFor, timeoutS);
            }
          }
          if (run.pid === null) {
            // Never started: envd refused it (bad cmd/cwd/user) or was unreachable before
            // the start event. A refusal is permanent and names envd's reason.
            if (err.code === "invalid_argument" || err.code === "not_found" || err.code === "permission_denied") {
              await sink.flush().catch(() => {});
              await ended(db, cmd.id, { state: "failed", error: err.message });
              throw new SpaceError("invalid_argument", err.message);
            }
            if (++attempt > 5) throw err;
          } else if (err.code === "not_found") {
            await sink.flush().catch(() => {});
            const msg = `command ${cmd.id} (pid ${run.pid}) ended while its stream was detached; exit code unknown`;
            await ended(db, cmd.id, { state: "failed", error: msg });
            throw new SpaceError("unavailable", msg);
          } else if (Date.now() - startedMs > timeoutS * 1000 + 30_000) {
            throw err;
          }
          attempt++;
          log.warn({ commandId: cmd.id, pid: run.pid, code: err.code, msg: err.message, attempt }, "command stream broke; reattaching");
          await sleep(Math.min(100 * 2 ** Math.min(attempt, 6), 3000), undefined, { signal });
          client = await connect().catch(() => client);
          run.client = client;
        }
      }
    } finally {
      clearTimeout(timer);
    }
  };
}

class CommandRun {
  pid: number | null;
  killedFor: "timeout" | null = null;

  constructor(
    public client: ProcessClient,
    /** envd's record of how the command's tagged process ended, if it has one. */
    private readonly record: (signal: AbortSignal) => Promise<EndedProcess | undefined>,
    private readonly cmd: CommandRow,
    private readonly sink: OutputSink,
    private readonly db: Db,
    private readonly log: Logger,
    /** A re-claimed operation: its previous claimer may have started the process without recording it. */
    private readonly rerun: boolean,
  ) {
    this.pid = cmd.pid;
  }
  /** A Start was sent by this run (a retry after a broken stream must look for it first). */
  #startSent = false;

  /** One attempt: start (or reattach) and read to the end event. */
  async stream(signal: AbortSignal): Promise<End> {
    let events;
    if (this.pid !== null) events = this.client.connect({ process: { selector: { case: "pid", value: this.pid } } }, { signal });
    else if (!this.#mayHaveStarted()) events = this.#start(signal);
    else if (await this.#running(signal)) events = this.client.connect({ process: { selector: { case: "tag", value: this.cmd.id } } }, { signal });
    else {
      // Not running: it may have started and ended already (never start it twice).
      const end = await this.endedWhileDetached(signal);
      if (end) return end;
      events = this.#start(signal);
    }
    for await (const res of events) {
      const ev = res.event?.event;
      switch (ev?.case) {
        case "start":
          if (this.pid !== ev.value.pid) {
            this.pid = ev.value.pid;
            try {
              await markCommandRunning(this.db, this.cmd.id, this.pid);
            } catch (e: unknown) {
              // Cancelled between our read and the start: honour the cancel.
              await this.client.sendSignal({ process: { selector: { case: "pid", value: this.pid } }, signal: Signal.SIGKILL }).catch(() => {});
              throw new SpaceError("failed_precondition", `command ${this.cmd.id} was cancelled before it started`, { cause: e });
            }
          }
          break;
        case "data": {
          const out = ev.value.output;
          if (out.case) this.sink.push(out.case, out.value);
          break;
        }
        case "end":
          return ev.value;
        default:
          break;
      }
    }
    throw new SpaceError("unavailable", `envd stream of command ${this.cmd.id} closed before the command ended`);
  }

  #start(signal: AbortSignal) {
    const c = this.cmd.cmd;
    this.#startSent = true;
    return this.client.start({ process: { cmd: c.cmd, args: c.args ?? [], envs: c.envs ?? {}, ...(c.cwd ? { cwd: c.cwd } : {}) }, tag: this.cmd.id, stdin: false }, { signal });
  }

  /**
   * Before a Start whose pid is not recorded: may it have been started already? A
   * re-claimed operation asks even when its row says queued (the dead claimer may have
   * started the process and died before recording the pid), as does a retry after a
   * broken stream.
   */
  #mayHaveStarted(): boolean {
    return this.rerun || this.#startSent || this.cmd.state === "running" || this.cmd.startedAt !== null;
  }

  /** Is the command's tag running in envd? */
  async #running(signal: AbortSignal): Promise<boolean> {
    try {
      const { processes } = await this.client.list({}, { signal });
      return processes.some((p) => p.tag === this.cmd.id);
    } catch {
      return false;
    }
  }

  /** How the process ended, from envd's record, when it ended with no stream attached. */
  async endedWhileDetached(signal: AbortSignal): Promise<End | undefined> {
    const rec = await this.record(signal);
    if (!rec) return undefined;
    this.log.warn(
      { commandId: this.cmd.id, pid: rec.pid, exitCode: rec.exit_code, droppedBytes: rec.detached_output_dropped_bytes },
      "command ended while its stream was detached; storing the output envd kept",
    );
    for (const o of rec.detached_output) this.sink.push(o.stream, Buffer.from(o.data, "base64"));
    if (this.pid === null) {
      this.pid = rec.pid;
      // A cancel that raced the end leaves the row killed; finish() then keeps that.
      await markCommandRunning(this.db, this.cmd.id, rec.pid).catch(() => {});
    }
    return { exitCode: rec.exit_code, exited: rec.exited, status: rec.status, error: rec.error ?? undefined };
  }

  async kill(why: "timeout"): Promise<void> {
    this.killedFor = why;
    if (this.pid === null) return;
    await this.client
      .sendSignal({ process: { selector: { case: "pid", value: this.pid } }, signal: Signal.SIGKILL })
      .catch((e: unknown) => this.log.warn({ err: e, commandId: this.cmd.id }, "could not kill command at its timeout"));
  }
}

async function finish(db: Db, id: string, end: End, killedFor: "timeout" | null, timeoutS: number): Promise<unknown> {
  if (killedFor === "timeout") {
    await ended(db, id, { state: "killed", exitCode: end.exitCode, error: `killed after timeout_s=${timeoutS}` });
    throw new SpaceError("deadline_exceeded", `command ${id} passed its timeout_s=${timeoutS} and was killed`);
  }
  if (end.exited) {
    return outcome(await ended(db, id, { state: "exited", exitCode: end.exitCode, error: end.error ?? null }));
  }
  return outcome(await ended(db, id, { state: "killed", exitCode: end.exitCode, error: end.error || end.status || "killed by a signal" }));
}

/** The operation result of an ended command; a killed one (cancelled) fails the operation. */
function outcome(c: CommandRow): unknown {
  if (c.state === "killed") throw new SpaceError("failed_precondition", `command ${c.id} was cancelled (${c.error ?? "killed"})`);
  if (c.state === "failed") throw new SpaceError("invalid_argument", c.error ?? `command ${c.id} failed`);
  return toCommandOutcome(c);
}

async function ended(db: Db, id: string, end: Parameters<typeof finishCommand>[2]): Promise<CommandRow> {
  const row = await finishCommand(db, id, end);
  await db.notify(COMMAND_OUTPUT_CHANNEL, id).catch(() => {});
  return row;
}
