// @ts-check
/**
 * The spawn server: starts commands on behalf of a big process (exec.ts). fork() copies
 * the parent's page tables while the parent's event loop waits; on these machines that is
 * 5 ms at 45 MiB RSS, 39 ms at 246 MiB and 129 ms at 851 MiB per spawn, and a node agent
 * beside PGlite runs every runc/ip/nft/btrfs call through it. This process stays small, so
 * its forks are cheap and never stall the caller. Plain JavaScript on purpose: it is
 * started by bare `node` (no TypeScript loader, which would double its memory).
 *
 * Protocol, one JSON object per line. In: `{id, cmd, args, cwd?, env, input?, inputBase64?,
 * timeoutMs, maxStdoutBytes, nice?, stdioPaths?, passFdPaths?}` or `{kill: id}`. Out: `{id, exitCode,
 * signal, timedOut, durationMs, stdout, stderr}` or `{id, error}` (the command did not start).
 * Stdin closing (the caller exited) ends this process; running commands are left to finish.
 * The caller starts it in its own process group, so a Ctrl-C to the caller's group does not
 * reach it (nor the commands it runs) while the caller shuts down: only the pipe ends it.
 */
import { spawn } from "node:child_process";
import { closeSync, constants, openSync } from "node:fs";
import { createInterface } from "node:readline";

/** @type {Map<number, () => void>} */
const terminators = new Map();

/** @param {unknown} msg */
function send(msg) {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

createInterface({ input: process.stdin, crlfDelay: Infinity })
  .on("line", (line) => {
    let req;
    try {
      req = JSON.parse(line);
    } catch {
      return;
    }
    if (typeof req.kill === "number") terminators.get(req.kill)?.();
    else start(req);
  })
  .on("close", () => process.exit(0));

/**
 * @param {{ id: number, cmd: string, args: string[], cwd?: string, env: Record<string, string>, input?: string,
 *   inputBase64?: boolean, timeoutMs: number, maxStdoutBytes: number, nice?: number, stdioPaths?: [string, string, string],
 *   passFdPaths?: string[] }} req
 */
function start(req) {
  const started = performance.now();
  /** @type {number[]} */
  const fds = [];
  let child;
  try {
    /** Opened for the child, closed here once it has its copies. @param {number} fd */
    const keep = (fd) => (fds.push(fd), fd);
    /** @type {Array<"pipe" | number>} */
    const stdio = req.stdioPaths ? req.stdioPaths.map((p, i) => keep(openSync(p, i === 0 ? "r" : "a"))) : ["pipe", "pipe", "pipe"];
    // fds 3.. of the command: write ends of FIFOs the caller reads. Non-blocking and never
    // created: a FIFO nobody reads fails here (ENXIO) instead of stalling this process.
    for (const p of req.passFdPaths ?? []) stdio.push(keep(openSync(p, constants.O_WRONLY | constants.O_NONBLOCK)));
    // Niceness is per thread: renicing the pid after spawn raced the command's own threads
    // and children (runc forks the container's init from another thread), so start it niced.
    child = req.nice
      ? spawn("nice", ["-n", String(req.nice), req.cmd, ...req.args], { cwd: req.cwd, env: req.env, stdio })
      : spawn(req.cmd, req.args, { cwd: req.cwd, env: req.env, stdio });
  } catch (e) {
    send({ id: req.id, error: e instanceof Error ? e.message : String(e) });
    return;
  } finally {
    for (const fd of fds) closeSync(fd); // the child has its own copies now
  }
  let done = false;
  let timedOut = false;
  /** @type {Buffer[]} */
  const out = [];
  let outBytes = 0;
  /** @type {Buffer[]} */
  const err = [];
  /** @type {NodeJS.Timeout | undefined} */
  let killTimer;
  const terminate = () => {
    child.kill("SIGTERM");
    killTimer = setTimeout(() => child.kill("SIGKILL"), 2000);
  };
  const timer = setTimeout(() => {
    timedOut = true;
    terminate();
  }, req.timeoutMs);
  terminators.set(req.id, terminate);
  const finish = (/** @type {Record<string, unknown>} */ msg) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    if (killTimer) clearTimeout(killTimer);
    terminators.delete(req.id);
    send({ id: req.id, ...msg });
  };
  child.stdout?.on("data", (/** @type {Buffer} */ b) => {
    if (outBytes < req.maxStdoutBytes) out.push(b);
    outBytes += b.length;
  });
  child.stderr?.on("data", (/** @type {Buffer} */ b) => {
    err.push(b);
    if (err.length > 64) err.splice(0, err.length - 64);
  });
  if (child.stdin) {
    child.stdin.on("error", () => undefined);
    if (req.input !== undefined) child.stdin.end(req.inputBase64 ? Buffer.from(req.input, "base64") : req.input);
    else child.stdin.end();
  }
  child.on("error", (e) => finish({ error: e.message }));
  child.on("close", (code, sig) =>
    finish({
      exitCode: code,
      signal: sig,
      timedOut,
      durationMs: Math.round(performance.now() - started),
      stdout: Buffer.concat(out).toString("utf8"),
      stderr: Buffer.concat(err).toString("utf8"),
    }),
  );
}
