// exec() through the spawn server: output, stdin, failures, timeouts, aborts, large outputs.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { constants } from "node:fs";
import { readlink } from "node:fs/promises";
import { mkdtemp, open, readFile, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { addNetns, exec, ExecError, writeIn } from "./exec.ts";

describe("exec", () => {
  it("returns stdout and stderr, feeds stdin (text and bytes)", async () => {
    const r = await exec("sh", ["-c", "echo out; echo err >&2; cat"], { input: "IN" });
    assert.equal(r.stdout, "out\nIN");
    assert.equal(r.stderr, "err\n");
    assert.equal(r.exitCode, 0);
    assert.equal((await exec("cat", [], { input: Buffer.from([0x68, 0x69]) })).stdout, "hi");
  });

  it("throws ExecError on a non-zero exit unless allowFailure; names a missing command", async () => {
    await assert.rejects(exec("sh", ["-c", "echo bad >&2; exit 3"]), (e: unknown) => e instanceof ExecError && e.result.exitCode === 3 && /exited 3: bad/.test(e.message));
    assert.equal((await exec("sh", ["-c", "exit 3"], { allowFailure: true })).exitCode, 3);
    await assert.rejects(exec("/nonexistent-space-cmd", []), /nonexistent-space-cmd.*ENOENT/);
  });

  it("kills on timeout and on abort", async () => {
    await assert.rejects(exec("sleep", ["5"], { timeoutMs: 200 }), (e: unknown) => e instanceof ExecError && e.result.timedOut);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const t0 = performance.now();
    await assert.rejects(exec("sleep", ["5"], { signal: ac.signal }), /killed by SIGTERM/);
    assert.ok(performance.now() - t0 < 4000);
  });

  it("gives a command this process's environment, or exactly the one asked for", async () => {
    const env = (r: { stdout: string }) => new Map(r.stdout.split("\0").filter(Boolean).map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
    const inherited = env(await exec("cat", ["/proc/self/environ"]));
    assert.equal(inherited.get("PATH"), process.env.PATH);
    assert.equal(inherited.get("HOME"), process.env.HOME);
    const given = env(await exec("cat", ["/proc/self/environ"], { env: { PATH: process.env.PATH, SPACE_EXEC_TEST: "a b=c" } }));
    assert.deepEqual([...given.keys()].sort(), ["PATH", "SPACE_EXEC_TEST"]);
    assert.equal(given.get("SPACE_EXEC_TEST"), "a b=c");
  });

  it("starts each command in its own session, without forking the server (its spawn addon), in the working directory asked for", async () => {
    // The addon's children lead their own session; child_process's would share the server's.
    const r = await exec("sh", ["-c", 'echo $$ $(cut -d" " -f6 /proc/$$/stat) $(pwd)'], { cwd: "/tmp" });
    const [pid, sid, cwd] = r.stdout.trim().split(" ");
    assert.equal(sid, pid, "the spawn server forked it through child_process: its addon (dist/node/spawn.node, npm run build:envd) did not load");
    assert.equal(cwd, "/tmp");
  });

  it("writes to the files and passes the descriptors it is given (a runtime's log and its readiness FIFO)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "space-exec-"));
    try {
      const log = join(dir, "log");
      const fifo = join(dir, "ready");
      await exec("mkfifo", [fifo]);
      const reader = await open(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      try {
        await exec("sh", ["-c", "echo out; echo err >&2; echo ready >&3; cat"], { stdioPaths: ["/dev/null", log, log], passFdPaths: [fifo] });
        assert.equal(await readFile(log, "utf8"), "out\nerr\n");
        const buf = Buffer.alloc(16);
        const { bytesRead } = await reader.read(buf, 0, 16, null);
        assert.equal(buf.subarray(0, bytesRead).toString(), "ready\n");
      } finally {
        await reader.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("runs a command in the namespaces it is given (a sandbox's network, a process's hostname), naming one it cannot join", async () => {
    const other = spawn("unshare", ["--uts", "--net", "sleep", "30"], { stdio: "ignore" });
    try {
      await new Promise((r) => setTimeout(r, 200));
      const ns = (kind: string) => `/proc/${other.pid}/ns/${kind}`;
      assert.notEqual(await readlink(ns("net")), await readlink("/proc/self/ns/net"), "unshare made no namespace of its own");
      const r = await exec("sh", ["-c", "readlink /proc/self/ns/net /proc/self/ns/uts"], { namespaces: { net: ns("net"), uts: ns("uts") } });
      assert.deepEqual(r.stdout.trim().split("\n"), [await readlink(ns("net")), await readlink(ns("uts"))]);
      await assert.rejects(exec("true", [], { namespaces: { net: "/nonexistent-space-ns" } }), /\/nonexistent-space-ns/);
    } finally {
      other.kill("SIGKILL");
    }
  });

  it("writes a file as seen from inside namespaces (a netns's sysctl, a UTS namespace's hostname), naming what failed", async () => {
    const other = spawn("unshare", ["--uts", "--net", "sleep", "30"], { stdio: "ignore" });
    try {
      await new Promise((r) => setTimeout(r, 200));
      const ns = (kind: string) => `/proc/${other.pid}/ns/${kind}`;
      const sysctl = "/proc/sys/net/ipv4/conf/all/route_localnet";
      const ours = (await readFile(sysctl, "utf8")).trim();
      const theirs = ours === "1" ? "0" : "1";
      await writeIn(sysctl, theirs, { net: ns("net") });
      await writeIn("/proc/sys/kernel/hostname", "space-write-in", { uts: ns("uts") });
      const r = await exec("sh", ["-c", `cat ${sysctl}; hostname`], { namespaces: { net: ns("net"), uts: ns("uts") } });
      assert.deepEqual(r.stdout.trim().split("\n"), [theirs, "space-write-in"]);
      assert.equal((await readFile(sysctl, "utf8")).trim(), ours, "the write reached this process's namespace");
      assert.notEqual(hostname(), "space-write-in");
      await assert.rejects(writeIn("/nonexistent-space-file", "x", {}), /\/nonexistent-space-file.*(ENOENT|No such file)/);
      await assert.rejects(writeIn(sysctl, "1", { net: "/nonexistent-space-ns" }), /\/nonexistent-space-ns/);
    } finally {
      other.kill("SIGKILL");
    }
  });

  it("binds a new network namespace at a file that did not exist, and refuses one that does", async () => {
    const dir = await mkdtemp(join(tmpdir(), "space-netns-"));
    const path = join(dir, "ns");
    try {
      await addNetns(path);
      const r = await exec("sh", ["-c", "readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1"], { namespaces: { net: path } });
      const [ns, ...links] = r.stdout.trim().split("\n");
      assert.notEqual(ns, await readlink("/proc/self/ns/net"));
      assert.deepEqual(links.map((l) => l.trim()), ["lo"]);
      await assert.rejects(addNetns(path), /EEXIST/);
      assert.equal((await exec("sh", ["-c", "readlink /proc/self/ns/net"], { namespaces: { net: path } })).stdout.trim(), ns, "the refused call replaced the namespace");
    } finally {
      await exec("umount", [path], { allowFailure: true });
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("carries a 12 MiB output of control bytes and many concurrent commands", async () => {
    const big = await exec("head", ["-c", String(12 * 1024 * 1024), "/dev/zero"]);
    assert.equal(big.stdout.length, 12 * 1024 * 1024);
    const all = await Promise.all(Array.from({ length: 30 }, (_, i) => exec("echo", [String(i)])));
    all.forEach((r, i) => assert.equal(r.stdout, `${i}\n`));
  });
});
