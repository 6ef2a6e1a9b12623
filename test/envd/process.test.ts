import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { Signal, type StartResponse } from "../../src/gen/process/process_pb.ts";
import { ensureTestUser, envelope, parseEnvelopes, startEnvd, TEST_USER, waitFor, type RunningEnvd } from "./harness.ts";

type Ev = StartResponse["event"];

async function collect(it: AsyncIterable<{ event?: Ev }>) {
  const events: NonNullable<Ev>["event"][] = [];
  for await (const m of it) events.push(m.event!.event);
  return events;
}

function output(events: NonNullable<Ev>["event"][], kind: "stdout" | "stderr" | "pty" = "stdout"): Buffer {
  const parts: Uint8Array[] = [];
  for (const e of events) if (e.case === "data" && e.value.output.case === kind) parts.push(e.value.output.value);
  return Buffer.concat(parts);
}

const bash = (cmd: string) => ({ cmd: "/bin/bash", args: ["-l", "-c", cmd], envs: {} });

describe("envd process.Process", () => {
  let envd: RunningEnvd;
  let user: ReturnType<typeof ensureTestUser>;
  before(async () => {
    user = ensureTestUser();
    envd = await startEnvd();
  });
  after(async () => {
    await envd?.stop();
  });

  for (const binary of [false, true]) {
    test(`start: start, data, end in order (${binary ? "binary" : "json"})`, async () => {
      const c = envd.process({ binary });
      const events = await collect(c.start({ process: bash("echo hi; echo oops >&2; exit 3"), stdin: false }));
      assert.equal(events[0]!.case, "start");
      assert.ok((events[0]!.value as { pid: number }).pid > 1);
      const last = events.at(-1)!;
      assert.equal(last.case, "end");
      assert.deepEqual(
        { exitCode: last.value.exitCode, exited: last.value.exited, status: last.value.status, error: last.value.error },
        { exitCode: 3, exited: true, status: "exit status 3", error: "exit status 3" },
      );
      assert.equal(output(events).toString(), "hi\n");
      assert.equal(output(events, "stderr").toString(), "oops\n");
    });
  }

  test("runs as the default user with its home, env merged over defaults", async () => {
    const c = envd.process();
    const events = await collect(
      c.start({ process: { ...bash('echo "$(id -un) $(id -u) $HOME $USER $FOO $PWD"'), envs: { FOO: "bar" } }, stdin: false }),
    );
    assert.equal(output(events).toString(), `${TEST_USER} ${user.uid} ${user.home} ${TEST_USER} bar ${user.home}\n`);
    const root = await collect(envd.process({ user: "root" }).start({ process: { ...bash("id -un; pwd"), cwd: "/tmp" } }));
    assert.equal(output(root).toString(), "root\n/tmp\n");
  });

  test("unknown user and missing cwd are invalid_argument", async () => {
    await assert.rejects(collect(envd.process({ user: "nosuchuser" }).start({ process: bash("true") })), (e: unknown) => {
      assert.equal(ConnectError.from(e).code, Code.InvalidArgument);
      return true;
    });
    await assert.rejects(
      collect(envd.process().start({ process: { ...bash("true"), cwd: "/nonexistent/dir" } })),
      (e: unknown) => {
        assert.equal(ConnectError.from(e).code, Code.InvalidArgument);
        return true;
      },
    );
  });

  test("a NUL byte in cmd, an argument, an env var or cwd is invalid_argument naming it; an empty cmd too", async () => {
    const refused = async (process: ReturnType<typeof bash> & { cwd?: string }, what: RegExp) =>
      assert.rejects(collect(envd.process().start({ process })), (e: unknown) => {
        const err = ConnectError.from(e);
        assert.equal(err.code, Code.InvalidArgument);
        assert.match(err.rawMessage, what);
        return true;
      });
    await refused({ ...bash("true"), cmd: "/bin/ba\0sh" }, /^cmd must not contain NUL bytes$/);
    await refused(bash("echo a\0b"), /^args\[2\] must not contain NUL bytes$/);
    await refused({ ...bash("true"), envs: { A: "x\0y" } }, /^env "A" must not contain NUL bytes$/);
    await refused({ ...bash("true"), cwd: "/tmp\0x" }, /NUL/);
    await refused({ ...bash("true"), cmd: "" }, /cmd/);
    // Nothing was left running or half-started: the next command runs.
    assert.equal(output(await collect(envd.process().start({ process: bash("echo ok") }))).toString(), "ok\n");
  });

  test("10 MiB of stdout arrives byte-exact", async () => {
    const f = `/tmp/envd-10m-${process.pid}`;
    try {
      const events = await collect(
        envd.process({ user: "root", binary: true }).start({ process: bash(`head -c 10485760 /dev/urandom | tee ${f} | cat`) }),
      );
      const out = output(events);
      assert.equal(out.length, 10485760);
      const want = createHash("sha256").update(readFileSync(f)).digest("hex");
      assert.equal(createHash("sha256").update(out).digest("hex"), want);
      assert.equal(events.at(-1)!.case, "end");
    } finally {
      rmSync(f, { force: true });
    }
  });

  test("slow reader: output is paused, not lost (bounded buffering)", async () => {
    const c = envd.process({ user: "root", binary: true });
    const it = c.start({ process: bash("head -c 20971520 /dev/zero") })[Symbol.asyncIterator]();
    let n = 0;
    let first = true;
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      const e = r.value.event!.event;
      if (e.case === "data") {
        n += e.value.output.value!.length;
        if (first) {
          first = false;
          await new Promise((r) => setTimeout(r, 500)); // stall: envd must pause the child
        }
      }
    }
    assert.equal(n, 20971520);
  });

  test("raw Connect framing: envelopes, end-of-stream {} and error trailer", async () => {
    const res = await fetch(`${envd.url}/process.Process/Start`, {
      method: "POST",
      headers: { "content-type": "application/connect+json", "connect-protocol-version": "1" },
      body: envelope({ process: { cmd: "/bin/echo", args: ["x"] }, stdin: false }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "application/connect+json");
    const env = parseEnvelopes(Buffer.from(await res.arrayBuffer()));
    assert.match(JSON.stringify(env[0]!.json), /^\{"event":\{"start":\{"pid":\d+\}\}\}$/);
    assert.deepEqual(env.at(-2)!.json, { event: { end: { exited: true, status: "exit status 0" } } });
    assert.deepEqual(env.at(-1), { flags: 2, json: {} });

    const bad = await fetch(`${envd.url}/process.Process/Connect`, {
      method: "POST",
      headers: { "content-type": "application/connect+json" },
      body: envelope({ process: { pid: 999999 } }),
    });
    const benv = parseEnvelopes(Buffer.from(await bad.arrayBuffer()));
    assert.equal(benv.length, 1);
    assert.equal(benv[0]!.flags, 2);
    assert.equal((benv[0]!.json as { error: { code: string } }).error.code, "not_found");

    const unary = await fetch(`${envd.url}/process.Process/SendSignal`, {
      method: "POST",
      headers: { "content-type": "application/json", "connect-protocol-version": "1" },
      body: JSON.stringify({ process: { pid: 999999 }, signal: "SIGNAL_SIGKILL" }),
    });
    assert.equal(unary.status, 404);
    assert.equal(((await unary.json()) as { code: string }).code, "not_found");
  });

  test("keepalives every Keepalive-Ping-Interval while idle", async () => {
    const events = await collect(envd.process({ keepaliveS: 0.3 }).start({ process: bash("sleep 1") }));
    assert.ok(events.filter((e) => e.case === "keepalive").length >= 2, JSON.stringify(events.map((e) => e.case)));
    assert.equal(events.at(-1)!.case, "end");
  });

  test("process outlives its client; reattach by tag and pid; list; SIGKILL", async () => {
    const c = envd.process();
    const ac = new AbortController();
    const it = c.start(
      { process: bash("i=0; while true; do i=$((i+1)); echo line$i; sleep 0.05; done"), tag: "ticker" },
      { signal: ac.signal },
    );
    let pid = 0;
    for await (const m of it) {
      if (m.event!.event.case === "start") {
        pid = m.event!.event.value.pid;
        break; // leaving the loop cancels the stream: the client disconnects
      }
    }
    ac.abort();
    const list = await c.list({});
    const info = list.processes.find((p) => p.pid === pid);
    assert.ok(info, "still running after disconnect");
    assert.equal(info.tag, "ticker");
    assert.equal(info.config!.cmd, "/bin/bash");

    const seen: string[] = [];
    let end: NonNullable<Ev>["event"] | undefined;
    let first: NonNullable<Ev>["event"] | undefined;
    for await (const m of c.connect({ process: { selector: { case: "tag", value: "ticker" } } })) {
      const e = m.event!.event;
      first ??= e;
      if (e.case === "data") {
        seen.push(Buffer.from(e.value.output.value!).toString());
        if (seen.length === 3) await c.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGKILL });
      }
      if (e.case === "end") end = e;
    }
    assert.equal(first!.case, "start");
    assert.ok(seen.join("").includes("line"));
    assert.equal(end!.case, "end");
    assert.equal(end!.value.status, "signal: killed");
    assert.equal(end!.value.exited, false);
    await waitFor(async () => !(await c.list({})).processes.some((p) => p.pid === pid), 3000, "process to leave the list");
    await assert.rejects(
      c.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGTERM }),
      (e: unknown) => {
        assert.equal(ConnectError.from(e).code, Code.NotFound);
        return true;
      },
    );
    await assert.rejects(collect(c.connect({ process: { selector: { case: "tag", value: "nope" } } })), (e: unknown) => {
      assert.equal(ConnectError.from(e).code, Code.NotFound);
      return true;
    });
  });

  test("SIGTERM ends a process with signal: terminated", async () => {
    const c = envd.process();
    let pid = 0;
    const events: NonNullable<Ev>["event"][] = [];
    for await (const m of c.start({ process: { cmd: "/bin/sleep", args: ["30"], envs: {} } })) {
      const e = m.event!.event;
      events.push(e);
      if (e.case === "start") {
        pid = e.value.pid;
        await c.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGTERM });
      }
    }
    const end = events.at(-1)!;
    assert.equal(end.case, "end");
    assert.equal(end.value.status, "signal: terminated");
    assert.equal(end.value.exitCode, -1);
  });

  test("stdin: SendInput then CloseStdin; stdin:false gives EOF at once", async () => {
    const c = envd.process();
    const events: NonNullable<Ev>["event"][] = [];
    for await (const m of c.start({ process: { cmd: "/bin/cat", args: [], envs: {} }, stdin: true })) {
      const e = m.event!.event;
      events.push(e);
      if (e.case === "start") {
        const sel = { selector: { case: "pid" as const, value: e.value.pid } };
        await c.sendInput({ process: sel, input: { input: { case: "stdin", value: Buffer.from("hello ") } } });
        await c.sendInput({ process: sel, input: { input: { case: "stdin", value: Buffer.from("world") } } });
        await c.closeStdin({ process: sel });
      }
    }
    assert.equal(output(events).toString(), "hello world");
    assert.equal(events.at(-1)!.case, "end");
    const closed = await collect(c.start({ process: { cmd: "/bin/cat", args: [], envs: {} }, stdin: false }));
    assert.equal(closed.at(-1)!.case, "end");
  });

  test("StreamInput (client streaming) feeds stdin", async () => {
    const c = envd.process();
    const events: NonNullable<Ev>["event"][] = [];
    for await (const m of c.start({ process: { cmd: "/bin/cat", args: [], envs: {} }, stdin: true, tag: "si" })) {
      const e = m.event!.event;
      events.push(e);
      if (e.case === "start") {
        const pid = e.value.pid;
        async function* reqs() {
          yield { event: { case: "start" as const, value: { process: { selector: { case: "pid" as const, value: pid } } } } };
          yield {
            event: {
              case: "data" as const,
              value: { input: { input: { case: "stdin" as const, value: Buffer.from("streamed") } } },
            },
          };
        }
        await c.streamInput(reqs());
        await c.closeStdin({ process: { selector: { case: "pid", value: pid } } });
      }
    }
    assert.equal(output(events).toString(), "streamed");
  });

  test("PTY: interactive shell, input, resize", async () => {
    const c = envd.process();
    const events: NonNullable<Ev>["event"][] = [];
    let sent = false;
    for await (const m of c.start({
      process: { cmd: "/bin/bash", args: ["-i", "-l"], envs: { TERM: "xterm", PS1: "$ " } },
      pty: { size: { cols: 80, rows: 24 } },
    })) {
      const e = m.event!.event;
      events.push(e);
      if (e.case === "start") {
        const sel = { selector: { case: "pid" as const, value: e.value.pid } };
        await c.update({ process: sel, pty: { size: { cols: 100, rows: 30 } } });
        await c.sendInput({
          process: sel,
          input: { input: { case: "pty", value: Buffer.from("stty size; echo $((6*7))x; exit 0\n") } },
        });
        sent = true;
      }
    }
    assert.ok(sent);
    const out = output(events, "pty").toString();
    assert.match(out, /30 100/);
    assert.match(out, /42x/);
    assert.equal(events.at(-1)!.case, "end");
  });

  test("Update on a non-pty process is invalid_argument", async () => {
    const c = envd.process();
    for await (const m of c.start({ process: { cmd: "/bin/sleep", args: ["0.3"], envs: {} } })) {
      const e = m.event!.event;
      if (e.case === "start") {
        await assert.rejects(
          c.update({ process: { selector: { case: "pid", value: e.value.pid } }, pty: { size: { cols: 1, rows: 1 } } }),
          (x: unknown) => {
            assert.equal(ConnectError.from(x).code, Code.InvalidArgument);
            return true;
          },
        );
      }
    }
  });

  test("Connect-Timeout-Ms kills the process", async () => {
    const c = envd.process();
    let pid = 0;
    await assert.rejects(
      (async () => {
        for await (const m of c.start({ process: { cmd: "/bin/sleep", args: ["30"], envs: {} } }, { timeoutMs: 400 })) {
          if (m.event!.event.case === "start") pid = m.event!.event.value.pid;
        }
      })(),
      (e: unknown) => {
        assert.equal(ConnectError.from(e).code, Code.DeadlineExceeded);
        return true;
      },
    );
    assert.ok(pid > 0);
    await waitFor(async () => !(await c.list({})).processes.some((p) => p.pid === pid), 3000, "timed-out process to end");
  });

  test("past Connect-Timeout-Ms the stream itself ends with a deadline_exceeded error (Start and Connect)", async () => {
    // A client that leaves the deadline to the server (no local timer) sees what envd sends.
    const raw = (method: string, body: unknown, timeoutMs: number) =>
      fetch(`${envd.url}/process.Process/${method}`, {
        method: "POST",
        headers: {
          "content-type": "application/connect+json",
          "connect-protocol-version": "1",
          "connect-timeout-ms": String(timeoutMs),
        },
        body: envelope(body),
      }).then(async (r) => parseEnvelopes(Buffer.from(await r.arrayBuffer())));
    const bg = envd.process();
    const tag = `deadline-${process.pid}`;
    const started = bg.start({ process: { cmd: "/bin/sleep", args: ["30"], envs: {} }, tag });
    await started[Symbol.asyncIterator]().next();
    const attached = await raw("Connect", { process: { tag } }, 300);
    assert.match(JSON.stringify(attached[0]!.json), /"start"/);
    assert.deepEqual(attached.at(-1), {
      flags: 2,
      json: { error: { code: "deadline_exceeded", message: "the operation timed out" } },
    });
    assert.ok(
      (await bg.list({})).processes.some((p) => p.tag === tag),
      "Connect's deadline leaves the process running",
    );
    await bg.sendSignal({ process: { selector: { case: "tag", value: tag } }, signal: Signal.SIGKILL });

    const own = await raw("Start", { process: { cmd: "/bin/sleep", args: ["30"] }, stdin: false }, 300);
    assert.equal(own.length, 2, JSON.stringify(own));
    assert.deepEqual(own.at(-1), {
      flags: 2,
      json: { error: { code: "deadline_exceeded", message: "the operation timed out" } },
    });
  });
});
