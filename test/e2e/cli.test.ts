/**
 * The `space` CLI as a user drives it: the real `bin/space.mjs` as a child process against
 * a real `space up` (runc), every client command at least once, `--json` parsed and its
 * fields checked, exit codes (docs/cli.md), one-line errors, a PTY typing into
 * `space sandbox shell`, and `cp` round-tripping bytes both ways. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import * as pty from "node-pty";
import { freePort, hostScopeFor, removeDataDir, startStack, waitFor, type Stack } from "../support/stack.ts";
import { baseEnv } from "../support/space-process.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;
const BIN = resolve("bin/space.mjs");

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `space <args>` with `env` as its only SPACE_ and E2B_ variables; resolves when it exits. */
function space(args: string[], env: Record<string, string>, stdin?: string): Promise<Run> {
  return new Promise((res, rej) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...baseEnv(), ...env }, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString("utf8")));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
    child.once("error", rej);
    child.once("exit", (code) => res({ code, stdout, stderr }));
    child.stdin.end(stdin ?? "");
  });
}

/** The run's stdout as JSON (fails with what it printed). */
function json<T = Record<string, unknown>>(r: Run): T {
  assert.equal(r.code, 0, `exit ${r.code}: ${r.stderr}`);
  try {
    return JSON.parse(r.stdout) as T;
  } catch {
    assert.fail(`not JSON: ${r.stdout.slice(0, 500)}`);
  }
}

/** What a person would read on a terminal: the shell's colour, title and bracketed-paste sequences removed. */
function visible(text: string): string {
  return text.replace(/\x1b\][^\x07]*\x07/g, "").replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "");
}

/** One line on stderr, no stack trace. */
function oneLine(r: Run, pattern: RegExp): void {
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one line expected:\n${r.stderr}`);
  assert.match(lines[0]!, pattern);
  assert.doesNotMatch(r.stderr, /\n\s+at /);
}

describe("the space CLI against space up", { skip, timeout: 30 * 60_000 }, () => {
  let stack: Stack;
  /** The connection through variables (and a data directory with nothing in it). */
  let env: Record<string, string>;
  const emptyDir = mkdtempSync(join(tmpdir(), "space-cli-empty-"));
  const work = mkdtempSync(join(tmpdir(), "space-cli-work-"));
  const sandboxes: string[] = [];

  before(async () => {
    stack = await startStack({ env: { SPACE_METRICS_INTERVAL_MS: "1000" } });
    env = {
      E2B_API_URL: stack.apiUrl,
      E2B_SANDBOX_URL: stack.sandboxUrl,
      E2B_API_KEY: stack.apiKey,
      SPACE_ADMIN_TOKEN: stack.adminToken,
      SPACE_DATA_DIR: emptyDir,
    };
  });
  after(async () => {
    if (sandboxes.length) await space(["sandbox", "kill", ...sandboxes], env).catch(() => undefined);
    await stack?.stop();
    removeDataDir(emptyDir);
    removeDataDir(work);
  });

  const create = async (...extra: string[]): Promise<string> => {
    const r = json<{ sandboxID: string }>(await space(["sandbox", "create", "base", "--timeout", "900", "--json", ...extra], env));
    assert.match(r.sandboxID, /^[a-z0-9]+$/);
    sandboxes.push(r.sandboxID);
    return r.sandboxID;
  };

  test("help: space --help and every command's help read well, with examples", async () => {
    const top = await space(["--help"], {});
    assert.equal(top.code, 0, top.stderr);
    for (const c of ["sandbox", "template", "tenant", "key", "token", "pool", "operation", "volume", "config", "node", "up"]) assert.match(top.stdout, new RegExp(`\\n  ${c}\\b`), `space --help lists ${c}`);
    assert.match(top.stdout, /Exit codes: 0 ok/);
    const groups: Record<string, string[]> = {
      sandbox: ["list", "info", "create", "kill", "pause", "resume", "fork", "snapshot", "timeout", "metrics", "logs", "exec", "shell", "cp"],
      template: ["list", "info", "build", "delete", "tag"],
      tenant: ["list", "create", "info", "disable"],
      key: ["create", "list", "revoke"],
      token: ["create", "list", "revoke"],
      pool: ["list", "info", "set", "delete"],
      operation: ["list", "get", "wait"],
      volume: ["create", "list", "get", "delete"],
      node: ["list", "show", "drain", "fence", "ready", "delete"],
    };
    for (const [group, subs] of Object.entries(groups)) {
      const h = await space([group, "--help"], {});
      assert.equal(h.code, 0, h.stderr);
      for (const s of subs) assert.match(h.stdout, new RegExp(`\\n  ${s}\\b`), `space ${group} --help lists ${s}`);
      assert.match(h.stdout, /Examples:/, `space ${group} --help has examples`);
      for (const s of subs) {
        const sh = await space([group, s, "--help"], {});
        assert.equal(sh.code, 0, `space ${group} ${s} --help: ${sh.stderr}`);
        assert.match(sh.stdout, new RegExp(`Usage: space ${group} ${s}`));
      }
    }
  });

  test("exit codes and one-line errors: usage, API down, no credentials, missing directory, bad id", async () => {
    const unknown = await space(["sandbox", "frobnicate"], env);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown command 'frobnicate'/);

    const port = await freePort();
    const down = await space(["sandbox", "list"], { ...env, E2B_API_URL: `http://127.0.0.1:${port}` });
    assert.equal(down.code, 5);
    oneLine(down, new RegExp(`^space: cannot reach the SPACE API at http://127\\.0\\.0\\.1:${port}.*is \`space up\` running\\? set SPACE_API_URL`));

    const noToken = await space(["tenant", "list"], { E2B_API_URL: stack.apiUrl, SPACE_DATA_DIR: emptyDir });
    assert.equal(noToken.code, 6);
    oneLine(noToken, /^space: no admin token: set SPACE_ADMIN_TOKEN or --admin-token/);

    const wrongKey = await space(["sandbox", "list"], { ...env, E2B_API_KEY: "e2b_wrong_wrong_wrong_wrong" });
    assert.equal(wrongKey.code, 6);
    oneLine(wrongKey, /refused the API key \(E2B_API_KEY, --api-key\)/);

    const missing = await space(["template", "build", join(work, "no-such-dir"), "--name", "nope"], env);
    assert.equal(missing.code, 3);
    oneLine(missing, new RegExp(`^space: no such file or directory: ${join(work, "no-such-dir")}/Dockerfile$`));

    const badId = await space(["sandbox", "info", "nosuchsandbox0000"], env);
    assert.equal(badId.code, 3);
    oneLine(badId, /^space: .*nosuchsandbox0000/);

    const badArg = await space(["sandbox", "create", "--timeout", "soon"], env);
    assert.equal(badArg.code, 2);
    oneLine(badArg, /^space: --timeout takes a whole number/);

    const debug = await space(["sandbox", "list", "--debug"], { ...env, E2B_API_URL: `http://127.0.0.1:${port}` });
    assert.equal(debug.code, 5);
    assert.match(debug.stderr, /\n\s+at /, "--debug prints the stack");
  });

  test("EADDRINUSE names the port and the variable that sets it", async () => {
    const busy: Server = createServer();
    const port = await freePort();
    await new Promise<void>((r) => busy.listen(port, "127.0.0.1", r));
    const dir = mkdtempSync(join(tmpdir(), "space-cli-busy-"));
    try {
      const r = await space(["up"], {
        SPACE_DATA_DIR: dir,
        SPACE_API_PORT: String(port),
        SPACE_GATEWAY_PORT: String(await freePort()),
        SPACE_NODE_PORT: String(await freePort()),
        SPACE_LOG_LEVEL: "error",
        ...hostScopeFor(dir),
      });
      assert.equal(r.code, 4, r.stderr);
      assert.match(r.stderr, new RegExp(`space: port ${port} on 127\\.0\\.0\\.1 is already in use .*set SPACE_API_PORT \\(or --port\\) to a free port`));
      assert.doesNotMatch(r.stderr, /\n\s+at /);
    } finally {
      busy.close();
      removeDataDir(dir);
    }
  });

  test("one connection convention: the data directory of space up, variables, flags; space config says which", async () => {
    // Nothing but the data directory: its endpoints.json and secrets.json.
    const local = { SPACE_DATA_DIR: stack.dataDir };
    const list = json<unknown[]>(await space(["sandbox", "list", "--json"], local));
    assert.ok(Array.isArray(list));
    const nodes = json<{ nodes: Array<{ id: string; status: string }> }>(await space(["node", "list", "--json"], local));
    assert.equal(nodes.nodes.length, 1);
    assert.equal(nodes.nodes[0]!.status, "ready");
    const fromDir = json<{ client: Record<string, { value: string; source: string }> }>(await space(["config", "--json"], local));
    assert.equal(fromDir.client["api-url"]!.value, stack.apiUrl);
    assert.equal(fromDir.client["api-url"]!.source, "data-dir");
    assert.equal(fromDir.client["sandbox-url"]!.value, stack.sandboxUrl);
    assert.equal(fromDir.client["admin-token"]!.source, "data-dir");

    // A flag beats a variable; secrets never appear.
    const port = await freePort();
    const flagged = await space(["config", "--json", "--api-url", stack.apiUrl], { ...env, E2B_API_URL: `http://127.0.0.1:${port}`, SPACE_LOG_LEVEL: "debug" });
    const c = json<{ client: Record<string, { value: string; source: string; origin?: string }>; variables: Array<{ name: string; value: string; source: string }> }>(flagged);
    assert.deepEqual([c.client["api-url"]!.value, c.client["api-url"]!.source], [stack.apiUrl, "flag"]);
    assert.deepEqual([c.client["api-key"]!.source, c.client["api-key"]!.origin], ["env", "E2B_API_KEY"]);
    assert.equal(c.variables.find((v) => v.name === "SPACE_LOG_LEVEL")?.source, "env");
    assert.equal(c.variables.find((v) => v.name === "SPACE_SUBSTRATE")?.source, "default");
    assert.equal(c.variables.find((v) => v.name === "SPACE_ADMIN_TOKEN")?.source, "env");
    assert.doesNotMatch(flagged.stdout, new RegExp(stack.adminToken));
    assert.doesNotMatch(flagged.stdout, new RegExp(stack.apiKey));
    const people = await space(["config"], env);
    assert.equal(people.code, 0, people.stderr);
    assert.match(people.stdout, /SPACE_ADMIN_TOKEN=spa_\*\*\*\*\S{4}\s+# env/);
    assert.match(people.stdout, /SPACE_SUBSTRATE=direct\s+# default/);
    assert.doesNotMatch(people.stdout, new RegExp(stack.adminToken));
    const withFlag = await space(["sandbox", "list", "--json", "--api-url", stack.apiUrl], { ...env, E2B_API_URL: `http://127.0.0.1:${port}` });
    assert.ok(Array.isArray(json(withFlag)));
  });

  test("sandbox create, list, info, exec, timeout, metrics, logs, kill", async () => {
    const id = await create("--metadata", "suite=cli", "--env", "GREETING=hello there");
    const listed = json<Array<{ sandboxID: string; state: string; metadata: Record<string, string> }>>(await space(["sandbox", "list", "--json", "--metadata", "suite=cli"], env));
    assert.deepEqual(
      listed.map((s) => [s.sandboxID, s.state, s.metadata.suite]),
      [[id, "running", "cli"]],
    );
    const table = await space(["sandbox", "list"], env);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, new RegExp(`${id}.*running`));
    const info = json<{ sandboxID: string; state: string; templateID: string; cpuCount: number; endAt: string }>(await space(["sandbox", "info", id, "--json"], env));
    assert.equal(info.sandboxID, id);
    assert.equal(info.state, "running");
    assert.equal(typeof info.cpuCount, "number");

    const echo = await space(["sandbox", "exec", id, "--", "sh", "-c", 'echo "$GREETING"; echo oops >&2'], env);
    assert.equal(echo.code, 0, echo.stderr);
    assert.equal(echo.stdout, "hello there\n");
    assert.equal(echo.stderr, "oops\n");
    const failing = await space(["sandbox", "exec", id, "--", "sh", "-c", "exit 7"], env);
    assert.equal(failing.code, 7, "exec exits with the command's exit code");
    const asJson = await space(["sandbox", "exec", "--json", id, "--", "ls", "-d", "/home/user"], env);
    assert.deepEqual(json(asJson), { exitCode: 0, stdout: "/home/user\n", stderr: "" });
    const cwd = await space(["sandbox", "exec", id, "--cwd", "/tmp", "--", "pwd"], env);
    assert.equal(cwd.stdout, "/tmp\n");

    const t = json<{ timeout: number }>(await space(["sandbox", "timeout", id, "1200", "--json"], env));
    assert.equal(t.timeout, 1200);
    const after = json<{ endAt: string }>(await space(["sandbox", "info", id, "--json"], env));
    assert.ok(Date.parse(after.endAt) > Date.now() + 1000 * 1000, `endAt ${after.endAt} moved to ~20 min from now`);

    const samples = await waitFor(
      async () => {
        const m = json<Array<{ timestamp: string; cpuCount: number; memTotal: number }>>(await space(["sandbox", "metrics", id, "--json"], env));
        return m.length > 0 ? m : undefined;
      },
      "a metrics sample",
      60_000,
      500,
    );
    assert.equal(typeof samples[0]!.memTotal, "number");
    assert.match((await space(["sandbox", "metrics", id], env)).stdout, /CPU %/);

    const lines = await waitFor(
      async () => {
        const r = await space(["sandbox", "logs", id, "--json"], env);
        assert.equal(r.code, 0, r.stderr);
        const entries = r.stdout
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { timestamp: string; level: string; message: string });
        return entries.length > 0 ? entries : undefined;
      },
      "log lines",
      60_000,
      500,
    );
    assert.ok(lines.every((l) => typeof l.timestamp === "string" && typeof l.level === "string" && typeof l.message === "string"));

    // -f keeps following (new lines arrive as commands run) until SIGINT.
    const follow = spawn(process.execPath, [BIN, "sandbox", "logs", id, "-f", "--json"], { env: { ...baseEnv(), ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let followed = "";
    follow.stdout.on("data", (b: Buffer) => (followed += b.toString("utf8")));
    const exited = new Promise<number | null>((r) => follow.once("exit", (c) => r(c)));
    await waitFor(() => followed.split("\n").filter(Boolean).length >= lines.length, "the first page", 60_000);
    const before = followed.split("\n").filter(Boolean).length;
    await space(["sandbox", "exec", id, "--", "true"], env);
    await waitFor(() => followed.split("\n").filter(Boolean).length > before, "a followed line", 60_000);
    follow.kill("SIGINT");
    assert.equal(await exited, 0);

    const killed = json<{ killed: string[] }>(await space(["sandbox", "kill", id, "--json"], env));
    assert.deepEqual(killed.killed, [id]);
    const gone = await space(["sandbox", "info", id], env);
    assert.equal(gone.code, 3);
    oneLine(gone, new RegExp(id));
  });

  test("sandbox pause, resume, fork, snapshot", async () => {
    const id = await create();
    await space(["sandbox", "exec", id, "--", "sh", "-c", "echo kept > /home/user/kept.txt"], env);
    const paused = json<{ state: string }>(await space(["sandbox", "pause", id, "--json"], env));
    assert.equal(paused.state, "paused");
    assert.equal(json<{ state: string }>(await space(["sandbox", "info", id, "--json"], env)).state, "paused");
    const again = await space(["sandbox", "pause", id], env);
    assert.equal(again.code, 4, `pausing a paused sandbox is refused: ${again.stderr}`);
    const resumed = json<{ sandboxID: string }>(await space(["sandbox", "resume", id, "--json", "--timeout", "900"], env));
    assert.equal(resumed.sandboxID, id);
    assert.equal(json<{ state: string }>(await space(["sandbox", "info", id, "--json"], env)).state, "running");
    assert.equal((await space(["sandbox", "exec", id, "--", "cat", "/home/user/kept.txt"], env)).stdout, "kept\n");

    const forks = json<Array<{ sandbox?: { sandboxID: string } }>>(await space(["sandbox", "fork", id, "--json", "--timeout", "600"], env));
    assert.equal(forks.length, 1);
    const fork = forks[0]!.sandbox!.sandboxID;
    sandboxes.push(fork);
    assert.notEqual(fork, id);
    assert.equal((await space(["sandbox", "exec", fork, "--", "cat", "/home/user/kept.txt"], env)).stdout, "kept\n");

    const snap = json<{ snapshotID: string; names: string[] }>(await space(["sandbox", "snapshot", id, "--name", "cli-snap", "--json"], env));
    assert.match(snap.snapshotID, /\S/);
    assert.deepEqual(snap.names, ["cli-snap"]);
  });

  test("sandbox cp round-trips bytes both ways; a missing local file is one line", async () => {
    const id = await create();
    const bytes = randomBytes(256 * 1024);
    const up = join(work, "up.bin");
    writeFileSync(up, bytes);
    const sent = json<{ bytes: number; to: string }>(await space(["sandbox", "cp", "--json", up, `${id}:/home/user/`], env));
    assert.equal(sent.bytes, bytes.length);
    assert.equal(sent.to, `${id}:/home/user/up.bin`);
    const sum = await space(["sandbox", "exec", id, "--", "sha256sum", "/home/user/up.bin"], env);
    assert.match(sum.stdout, new RegExp(`^${(await import("node:crypto")).createHash("sha256").update(bytes).digest("hex")} `));
    const downDir = join(work, "down");
    mkdirSync(downDir);
    const got = await space(["sandbox", "cp", `${id}:/home/user/up.bin`, downDir], env);
    assert.equal(got.code, 0, got.stderr);
    assert.match(got.stdout, /262144 bytes/);
    assert.ok(readFileSync(join(downDir, "up.bin")).equals(bytes), "the bytes came back unchanged");

    const missing = await space(["sandbox", "cp", join(work, "nope.bin"), `${id}:/tmp/x`], env);
    assert.equal(missing.code, 3);
    oneLine(missing, new RegExp(`no such file or directory: ${join(work, "nope.bin")}`));
    const remoteMissing = await space(["sandbox", "cp", `${id}:/no/such/file`, join(work, "x")], env);
    assert.equal(remoteMissing.code, 3, remoteMissing.stderr);
    const bothLocal = await space(["sandbox", "cp", up, join(work, "y")], env);
    assert.equal(bothLocal.code, 2);
    oneLine(bothLocal, /one side of cp must be <sandbox id>:\/path/);
  });

  test("sandbox shell: a PTY through envd echoes what is typed, and a resize changes stty size", async () => {
    const id = await create();
    const term = pty.spawn(process.execPath, [BIN, "sandbox", "shell", id], { name: "xterm", cols: 80, rows: 24, env: { ...baseEnv(), ...env } as Record<string, string> });
    let raw = "";
    let screen = "";
    term.onData((d) => {
      raw += d;
      screen = visible(raw);
    });
    const exited = new Promise<number>((r) => term.onExit((e) => r(e.exitCode)));
    const seen = (re: RegExp, what: string) => waitFor(() => re.test(screen), what, 60_000).catch((e: unknown) => assert.fail(`${String(e)}; screen:\n${screen.slice(-2000)}`));
    try {
      term.write("stty size\r");
      // Lines end in \r\r\n: the sandbox's PTY and this one each add a \r.
      await seen(/\n\r*24 80\r*\n/, "stty size 24 80");
      term.write("echo h''i\r");
      await seen(/\n\r*hi\r*\n/, "the echo of hi");
      term.resize(100, 40);
      // The resize travels as its own RPC: ask until the shell sees it.
      await waitFor(
        () => {
          if (/\n\r*40 100\r*\n/.test(screen)) return true;
          term.write("stty size\r");
          return false;
        },
        "stty size 40 100",
        60_000,
        500,
      ).catch((e: unknown) => assert.fail(`${String(e)}; screen:\n${screen.slice(-2000)}`));
      term.write("exit 3\r");
      assert.equal(await exited, 3, "shell exits with the shell's exit code");
      // Piped input (no terminal): it is typed into the PTY, its end ends the shell.
      const piped = await space(["sandbox", "shell", id], env, "echo pi''ped\nexit 5\n");
      assert.equal(piped.code, 5, piped.stderr);
      assert.match(visible(piped.stdout), /[\r\n]piped\r*\n/);
    } finally {
      try {
        term.kill();
      } catch {
        /* already gone */
      }
    }
  });

  test("template list, build, info, tag, delete", async () => {
    const listed = json<Array<{ templateID: string; aliases: string[] }>>(await space(["template", "list", "--json"], env));
    assert.ok(Array.isArray(listed));
    const dir = join(work, "tpl");
    mkdirSync(dir);
    writeFileSync(join(dir, "Dockerfile"), "FROM base\nRUN echo from-cli > /home/user/tpl.txt\n");
    const name = `cli-${randomBytes(3).toString("hex")}`;
    const built = await space(["template", "build", dir, "--name", name], env);
    const b = json<{ templateID: string; buildID: string }>(built);
    assert.match(b.templateID, /\S/);
    const all = json<Array<{ templateID: string; aliases: string[]; buildStatus: string }>>(await space(["template", "list", "--json"], env));
    assert.ok(all.some((t) => t.templateID === b.templateID && t.aliases.includes(name)));
    type Info = { id: string; name: string; aliases: Array<{ tag: string; build_id: string }>; builds: unknown[] };
    const info = json<Info>(await space(["template", "info", name, "--json"], env));
    assert.deepEqual([info.id, info.name, info.builds.length], [b.templateID, name, 1]);
    const tagged = json<{ buildID: string; tags: string[] }>(await space(["template", "tag", name, "stable", "--json"], env));
    assert.deepEqual([tagged.buildID, tagged.tags], [b.buildID, ["stable"]]);
    const tags = () => space(["template", "info", name, "--json"], env).then((r) => json<Info>(r).aliases.map((a) => `${a.tag}=${a.build_id}`));
    assert.ok((await tags()).includes(`stable=${b.buildID}`));
    const fromName = json<{ sandboxID: string }>(await space(["sandbox", "create", name, "--json"], env));
    sandboxes.push(fromName.sandboxID);
    assert.equal((await space(["sandbox", "exec", fromName.sandboxID, "--", "cat", "/home/user/tpl.txt"], env)).stdout, "from-cli\n");
    await space(["sandbox", "kill", fromName.sandboxID], env);
    const untag = await space(["template", "tag", name, "stable", "--remove"], env);
    assert.equal(untag.code, 0, untag.stderr);
    assert.ok(!(await tags()).some((t) => t.startsWith("stable=")));
    const del = json<{ deleted: string }>(await space(["template", "delete", name, "--json"], env));
    assert.equal(del.deleted, b.templateID);
    const again = await space(["template", "delete", name], env);
    assert.equal(again.code, 3);
    oneLine(again, new RegExp(`no template has the id or name ${name}`));
  });

  test("tenant, key and token commands (Admin API)", async () => {
    const name = `acme-${randomBytes(3).toString("hex")}`;
    const t = json<{ id: string; name: string }>(await space(["tenant", "create", name, "--json"], env));
    assert.equal(t.name, name);
    const dup = await space(["tenant", "create", name], env);
    assert.equal(dup.code, 4, dup.stderr);
    assert.ok(json<Array<{ id: string }>>(await space(["tenant", "list", "--json"], env)).some((x) => x.id === t.id));
    assert.equal(json<{ id: string }>(await space(["tenant", "info", name, "--json"], env)).id, t.id);

    const k = json<{ id: string; key: string; prefix: string }>(await space(["key", "create", "--tenant", name, "--name", "ci", "--json"], env));
    assert.match(k.key, /^e2b_/);
    // The new key works with the same convention (and sees none of the default tenant's sandboxes).
    assert.deepEqual(json(await space(["sandbox", "list", "--json"], { ...env, E2B_API_KEY: k.key })), []);
    const keys = json<Array<{ id: string; name: string }>>(await space(["key", "list", "--tenant", t.id, "--json"], env));
    assert.deepEqual(
      keys.map((x) => [x.id, x.name]),
      [[k.id, "ci"]],
    );

    const badScope = await space(["token", "create", "--tenant", name, "--scope", "sandboxes:everything"], env);
    assert.equal(badScope.code, 2);
    oneLine(badScope, /unknown scope sandboxes:everything/);
    const tok = json<{ id: string; token: string; scopes: string[]; expiresAt: string | null }>(
      await space(["token", "create", "--tenant", name, "--scope", "sandboxes:read,commands:exec", "--expires-in", "3600", "--json"], env),
    );
    assert.deepEqual(tok.scopes, ["sandboxes:read", "commands:exec"]);
    assert.ok(tok.expiresAt);
    const ops = await fetch(`${stack.apiUrl}/v1/sandboxes`, { headers: { authorization: `Bearer ${tok.token}` } });
    assert.equal(ops.status, 200, "the token reads sandboxes");
    assert.ok(json<Array<{ id: string }>>(await space(["token", "list", "--tenant", name, "--json"], env)).some((x) => x.id === tok.id));
    assert.equal(json<{ revoked: string }>(await space(["token", "revoke", "--tenant", name, tok.id, "--json"], env)).revoked, tok.id);
    assert.equal((await fetch(`${stack.apiUrl}/v1/sandboxes`, { headers: { authorization: `Bearer ${tok.token}` } })).status, 401);
    assert.equal(json<{ revoked: string }>(await space(["key", "revoke", "--tenant", name, k.id, "--json"], env)).revoked, k.id);
    const revoked = await space(["sandbox", "list"], { ...env, E2B_API_KEY: k.key });
    assert.equal(revoked.code, 6);

    const disabled = json<{ disabledAt: string | null }>(await space(["tenant", "disable", name, "--json"], env));
    assert.ok(disabled.disabledAt);
    const noTenant = await space(["key", "list", "--tenant", "no-such-tenant"], env);
    assert.equal(noTenant.code, 3);
    oneLine(noTenant, /no tenant has the id or name no-such-tenant/);
  });

  test("pool set, list, info, delete (warm pools)", async () => {
    const set = json<{ template: string; size: number; max_size: number }>(await space(["pool", "set", "base", "--size", "0", "--max-size", "2", "--json"], env));
    assert.deepEqual([set.template, set.size, set.max_size], ["base", 0, 2]);
    const under = await space(["pool", "set", "base", "--size", "3", "--max-size", "2"], env);
    assert.equal(under.code, 2, under.stderr);
    assert.match(under.stderr, /max_size: must be at least size \(3\)/);
    assert.ok(json<Array<{ template: string }>>(await space(["pool", "list", "--json"], env)).some((p) => p.template === "base"));
    const info = json<{ template: string; members: unknown[] }>(await space(["pool", "info", "base", "--json"], env));
    assert.equal(info.template, "base");
    assert.ok(Array.isArray(info.members));
    const people = await space(["pool", "list"], env);
    assert.match(people.stdout, /base/);
    assert.equal(json<{ deleted: string }>(await space(["pool", "delete", "base", "--json"], env)).deleted, "base");
    const gone = await space(["pool", "info", "base"], env);
    assert.equal(gone.code, 3);
    const bad = await space(["pool", "set", "base", "--size", "-1"], env);
    assert.equal(bad.code, 2);
  });

  test("operation list, get, wait (Native API)", async () => {
    const r = await fetch(`${stack.apiUrl}/v1/sandboxes`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ template: "base", timeout_s: 600 }),
    });
    assert.equal(r.status, 202);
    const opId = ((await r.json()) as { id: string }).id;
    const waited = json<{ id: string; state: string; result: { id: string } }>(await space(["operation", "wait", opId, "--json"], env));
    assert.equal(waited.id, opId);
    assert.equal(waited.state, "succeeded");
    sandboxes.push(waited.result.id);
    const got = json<{ id: string; kind: string; state: string }>(await space(["operation", "get", opId, "--json"], env));
    assert.deepEqual([got.id, got.kind, got.state], [opId, "sandbox.create", "succeeded"]);
    const list = json<{ operations: Array<{ id: string }> }>(await space(["operation", "list", "--kind", "sandbox.create", "--json"], env));
    assert.ok(list.operations.some((o) => o.id === opId));
    const missing = await space(["operation", "get", "op_doesnotexist"], env);
    assert.equal(missing.code, 3, missing.stderr);
  });

  test("volume create, list, get, delete (Native API); refusals are one line with their exit codes", async () => {
    const name = `cli-vol-${randomBytes(3).toString("hex")}`;
    const v = json<{ id: string; name: string; size_mib: number; token: string; mounted_by: unknown[] }>(await space(["volume", "create", name, "--size-mib", "64", "--json"], env));
    assert.match(v.id, /^vol_[a-z0-9]{16}$/);
    assert.deepEqual([v.name, v.size_mib, v.mounted_by], [name, 64, []]);
    assert.match(v.token, /^vt_/);
    const listed = await space(["volume", "list"], env);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, new RegExp(`${v.id}[\\s│]+${name}[\\s│]+64 MiB`));
    assert.deepEqual(json<Array<{ id: string }>>(await space(["volume", "list", "--json"], env)).map((x) => x.id).filter((id) => id === v.id), [v.id]);

    const bad = await space(["volume", "create", "bad name"], env);
    assert.equal(bad.code, 2, bad.stderr);
    oneLine(bad, /volume name "bad name" is not valid/);
    const twice = await space(["volume", "create", name], env);
    assert.equal(twice.code, 4, twice.stderr);
    oneLine(twice, new RegExp(`volume '${name}' already exists`));

    // Held by a sandbox (a Native create that mounts it): get names it, delete is refused naming it.
    const r = await fetch(`${stack.apiUrl}/v1/sandboxes`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ template: "base", timeout_s: 600, volumes: [{ name, path: "/mnt/v" }] }),
    });
    assert.equal(r.status, 202);
    const created = json<{ state: string; result: { id: string } }>(await space(["operation", "wait", ((await r.json()) as { id: string }).id, "--json"], env));
    assert.equal(created.state, "succeeded");
    sandboxes.push(created.result.id);
    const held = json<{ mounted_by: unknown[] }>(await space(["volume", "get", name, "--json"], env));
    assert.deepEqual(held.mounted_by, [{ sandbox_id: created.result.id, read_only: false }]);
    const busy = await space(["volume", "delete", name], env);
    assert.equal(busy.code, 4, busy.stderr);
    oneLine(busy, new RegExp(`volume ${v.id} is in use by sandbox ${created.result.id}`));

    assert.equal((await space(["sandbox", "kill", created.result.id], env)).code, 0);
    const del = await space(["volume", "delete", name], env);
    assert.equal(del.code, 0, del.stderr);
    assert.match(del.stdout, new RegExp(`deleted volume ${v.id}`));
    const gone = await space(["volume", "get", v.id], env);
    assert.equal(gone.code, 3, gone.stderr);
    oneLine(gone, new RegExp(`volume ${v.id} not found`));
  });
});
