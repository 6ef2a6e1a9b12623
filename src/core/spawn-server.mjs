// @ts-check
/**
 * The spawn server: starts commands on behalf of a big process (exec.ts). fork() copies
 * the parent's page tables while the parent's event loop waits; on these machines that is
 * 5 ms at 45 MiB RSS, 39 ms at 246 MiB and 129 ms at 851 MiB per spawn, and a node agent
 * beside PGlite runs every runc/ip/nft/btrfs call through it. This process stays small and
 * never stalls the caller. Plain JavaScript on purpose: it is started by bare `node` (no
 * TypeScript loader, which would double its memory).
 *
 * Protocol, one JSON object per line. In: `{id, cmd, args, cwd?, env?, input?, inputBase64?,
 * timeoutMs, maxStdoutBytes, nice?, stdioPaths?, passFdPaths?, namespaces?}`, `{id, write, content,
 * namespaces, timeoutMs}` (`content` written to the file `write` as seen from `namespaces`: a
 * sysctl of a netns, a UTS namespace's hostname; the addon's child writes it, no command runs),
 * `{id, netns, timeoutMs}` (a new network namespace bound at the existing file `netns`, as `ip
 * netns add` makes one), `{id, netlink, protocol, namespaces, files?, timeoutMs}` (netlink messages,
 * base64, sent from inside `namespaces`, `files` open as the descriptors they name; the kernel's
 * replies come back base64 in `stdout`) or `{kill: id}`. Out: `{id, exitCode, signal, timedOut, durationMs, stdout, stderr}` or
 * `{id, error}` (the command did not start, the write failed).
 * Without `env` a command gets this process's environment, which is the caller's as it was when
 * it started this one (reading the caller's `process.env` for every request cost its loop ~0.1 ms:
 * each variable is a call into the C++ environment). Stdin closing (the caller exited) ends this process; running commands are left to finish.
 * The caller starts it in its own process group, so a Ctrl-C to the caller's group does not
 * reach it (nor the commands it runs) while the caller shuts down: only the pipe ends it.
 *
 * Nor does it fork: commands start through the spawn addon (core/native/spawn.c, in
 * dist/node from build:envd, copied beside this file by the build), 0.11 ms of this
 * process's loop per start against child_process's fork, 1.2 ms at its ~55 MB (medians of
 * 200 `true`), so the ten commands of a create, and those of concurrent creates, do not
 * queue behind each other's forks. Each command gets its own session. Without the addon,
 * child_process.
 */
import { spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { closeSync, constants, existsSync, openSync } from "node:fs";
import { createRequire } from "node:module";
import { Socket } from "node:net";
import { constants as os } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/**
 * @typedef {EventEmitter & { stdin: import("node:stream").Writable | null, stdout: import("node:stream").Readable | null,
 *   stderr: import("node:stream").Readable | null, kill(sig: NodeJS.Signals): unknown }} Started What start() uses of a command
 * @typedef {{ pid: number, stdin?: number, stdout?: number, stderr?: number } | { error: number, namespace?: number }} Spawned
 * @typedef {{ code: number } | { signal: number } | { error: number }} Status
 * @typedef {{ spawn(candidates: string[], argv: string[], envp: string[], cwd: string, uid: number, gid: number, stdin: boolean, fds: number[], namespaces: string[]): Spawned,
 *   wait(pid: number): Status | undefined, writeIn(namespaces: string[], path: string, content: string): 0 | { error: number, namespace?: number },
 *   netnsAdd(path: string): 0 | { error: number },
 *   netlinkIn(namespaces: string[], protocol: number, request: Buffer, files: string[]): Buffer | { error: number, namespace?: number, file?: number } }} Addon
 */

/** @returns {Addon | undefined} */
function loadAddon() {
  const file = [join(import.meta.dirname, "spawn.node"), join(import.meta.dirname, "..", "..", "dist", "node", "spawn.node")].find((f) => existsSync(f));
  if (!file) return undefined;
  try {
    return /** @type {Addon} */ (createRequire(import.meta.url)(file));
  } catch (e) {
    process.stderr.write(`spawn server: the spawn addon ${file} did not load (${e instanceof Error ? e.message : String(e)}); commands start through fork\n`);
    return undefined;
  }
}
const addon = loadAddon();
/** uid and gid the addon leaves as they are. */
const KEEP_ID = 0xffffffff;
const ERRNO_NAMES = new Map(Object.entries(os.errno).map(([name, n]) => [n, name]));
const SIGNAL_NAMES = new Map(Object.entries(os.signals).map(([name, n]) => [n, name]));
/** @type {Map<number, (status: Status) => void>} pid → its exit, for the addon's children (libuv waits only for its own). */
const running = new Map();
function reap() {
  for (const [pid, exited] of running) {
    const status = addon?.wait(pid);
    if (status === undefined) continue;
    running.delete(pid);
    exited(status);
  }
}
if (addon) {
  process.on("SIGCHLD", reap);
  // A SIGCHLD coalesced with another's is not lost: a slow poll catches it.
  setInterval(() => running.size && reap(), 1000).unref();
}

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
    else if (typeof req.write === "string") write(req);
    else if (typeof req.netns === "string") netns(req);
    else if (typeof req.netlink === "string") netlink(req);
    else start(req);
  })
  .on("close", () => process.exit(0));

/**
 * Writes a file from inside namespaces. Without the addon, a command does it (`dd`, under
 * nsenter as start() runs any command in namespaces).
 * @param {{ id: number, write: string, content: string, namespaces: { net?: string, uts?: string }, timeoutMs: number }} req
 */
function write(req) {
  const started = performance.now();
  if (!addon) {
    start({ id: req.id, cmd: "dd", args: [`of=${req.write}`, "conv=nocreat", "status=none"], input: req.content, namespaces: req.namespaces, timeoutMs: req.timeoutMs, maxStdoutBytes: 0 });
    return;
  }
  const ns = Object.values(req.namespaces ?? {}).filter(Boolean);
  const r = addon.writeIn(ns, req.write, req.content);
  if (r !== 0) {
    const code = ERRNO_NAMES.get(r.error) ?? `errno ${r.error}`;
    send({ id: req.id, error: r.namespace === undefined ? `write ${req.write} ${code}` : `write ${req.write}: joining the namespace ${ns[r.namespace]} ${code}` });
    return;
  }
  sendDone(req.id, started);
}

/** The reply to work this process did itself (a write, a namespace, netlink messages): done. @param {number} id @param {number} started @param {string} [stdout] */
function sendDone(id, started, stdout = "") {
  send({ id, exitCode: 0, signal: null, timedOut: false, durationMs: Math.round(performance.now() - started), stdout, stderr: "" });
}

/**
 * A new network namespace bound at `req.netns`. Without the addon, `unshare --net=<file>`.
 * @param {{ id: number, netns: string, timeoutMs: number }} req
 */
function netns(req) {
  const started = performance.now();
  if (!addon) {
    start({ id: req.id, cmd: "unshare", args: [`--net=${req.netns}`, "true"], timeoutMs: req.timeoutMs, maxStdoutBytes: 0 });
    return;
  }
  const r = addon.netnsAdd(req.netns);
  if (r !== 0) send({ id: req.id, error: `new network namespace at ${req.netns} ${ERRNO_NAMES.get(r.error) ?? `errno ${r.error}`}` });
  else sendDone(req.id, started);
}

/**
 * Netlink messages sent from inside namespaces (node/network/netlink.ts). Only with the addon:
 * no command does it.
 * @param {{ id: number, netlink: string, protocol: number, namespaces: { net?: string }, files?: string[], timeoutMs: number }} req
 */
function netlink(req) {
  const started = performance.now();
  if (!addon) {
    send({ id: req.id, error: "netlink needs the spawn addon (spawn.node, built by npm run build:envd), which did not load" });
    return;
  }
  const ns = Object.values(req.namespaces ?? {}).filter(Boolean);
  const files = req.files ?? [];
  let r;
  try {
    r = addon.netlinkIn(ns, req.protocol, Buffer.from(req.netlink, "base64"), files);
  } catch (e) {
    // A malformed request (the addon's type check) is answered, never this process's end.
    send({ id: req.id, error: `netlink: ${e instanceof Error ? e.message : String(e)}` });
    return;
  }
  if (!Buffer.isBuffer(r)) {
    const code = ERRNO_NAMES.get(r.error) ?? `errno ${r.error}`;
    const where = r.namespace !== undefined ? `: joining the namespace ${ns[r.namespace]}` : r.file !== undefined ? `: opening ${files[r.file]}` : "";
    send({ id: req.id, error: `netlink${where} ${code}` });
    return;
  }
  sendDone(req.id, started, r.toString("base64"));
}

/** The environment of a request without one, as given to the addon. */
const INHERITED_ENVP = Object.entries(process.env).map(([k, v]) => `${k}=${v}`);

/**
 * @param {{ id: number, cmd: string, args: string[], cwd?: string, env?: Record<string, string>, input?: string,
 *   inputBase64?: boolean, timeoutMs: number, maxStdoutBytes: number, nice?: number, stdioPaths?: [string, string, string],
 *   passFdPaths?: string[], namespaces?: { net?: string, uts?: string } }} req
 */
function start(req) {
  const started = performance.now();
  /** @type {number[]} */
  const fds = [];
  /** @type {Started} */
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
    const [niced, nicedArgs] = req.nice ? ["nice", ["-n", String(req.nice), req.cmd, ...req.args]] : [req.cmd, req.args];
    const ns = Object.entries(req.namespaces ?? {}).filter(([, path]) => path);
    if (addon) child = addonSpawn(addon, niced, nicedArgs, req, stdio, ns.map(([, path]) => path));
    else {
      // Without the addon, nsenter joins them (an exec more).
      const [cmd, args] = ns.length ? ["nsenter", [...ns.map(([kind, path]) => `--${kind}=${path}`), "--", niced, ...nicedArgs]] : [niced, nicedArgs];
      child = spawn(cmd, args, { cwd: req.cwd, env: req.env, stdio });
    }
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

/**
 * A command started through the addon, as much of a ChildProcess as start() uses: `stdin`,
 * `stdout`, `stderr` (null where `stdio` gave a descriptor), `kill`, and `close` once it
 * exited and its output pipes closed. It started, or this threw: no `error` event comes.
 * @param {Addon} addon @param {string} cmd @param {string[]} args
 * @param {{ cwd?: string, env?: Record<string, string>, input?: string }} req @param {Array<"pipe" | number>} stdio
 * @param {string[]} namespaces files of the namespaces it joins first
 * @returns {Started}
 */
function addonSpawn(addon, cmd, args, req, stdio, namespaces) {
  const path = (req.env ?? process.env).PATH ?? "/usr/bin:/bin";
  // execvp's lookup: the name itself when it has a slash, else each PATH entry (empty = cwd).
  const candidates = cmd.includes("/") ? [cmd] : path.split(":").map((d) => (d === "" ? cmd : `${d.replace(/\/+$/, "")}/${cmd}`));
  const envp = req.env ? Object.entries(req.env).map(([k, v]) => `${k}=${v}`) : INHERITED_ENVP;
  // A pipe for stdin only when there is input; else /dev/null (EOF at once, as an ended pipe).
  const devNull = stdio[0] === "pipe" && req.input === undefined ? openSync("/dev/null", "r") : undefined;
  const fds = stdio.map((x, i) => (i === 0 && devNull !== undefined ? devNull : x === "pipe" ? -1 : x));
  let r;
  try {
    r = addon.spawn(candidates, [cmd, ...args], envp, req.cwd ?? "", KEEP_ID, KEEP_ID, true, fds, namespaces);
  } finally {
    if (devNull !== undefined) closeSync(devNull);
  }
  if ("error" in r) {
    const code = ERRNO_NAMES.get(r.error) ?? `errno ${r.error}`;
    const what = r.namespace === undefined ? `spawn ${cmd}` : `spawn ${cmd}: joining the namespace ${namespaces[r.namespace]}`;
    throw Object.assign(new Error(`${what} ${code}`), { code });
  }
  const pid = r.pid;
  const [stdin, stdout, stderr] = [r.stdin, r.stdout, r.stderr].map((fd, i) => (fd === undefined ? null : new Socket({ fd, readable: i > 0, writable: i === 0 })));
  const child = Object.assign(new EventEmitter(), {
    stdin: stdin ?? null,
    stdout: stdout ?? null,
    stderr: stderr ?? null,
    kill(/** @type {NodeJS.Signals} */ sig) {
      if (running.has(pid)) process.kill(pid, sig);
    },
  });
  let open = (stdout ? 1 : 0) + (stderr ? 1 : 0);
  /** @type {[number | null, string | null] | undefined} */
  let exit;
  const maybeClose = () => {
    if (exit && open === 0) child.emit("close", ...exit);
  };
  for (const s of [stdout, stderr])
    s?.on("error", () => undefined).once("close", () => {
      open--;
      maybeClose();
    });
  running.set(pid, (status) => {
    // `error`: reaped by someone else (ECHILD), its status lost; reported as killed.
    exit = "code" in status ? [status.code, null] : [null, ("signal" in status && SIGNAL_NAMES.get(status.signal)) || "SIGKILL"];
    maybeClose();
  });
  return child;
}
