// exec() through the spawn server: output, stdin, failures, timeouts, aborts, large outputs.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { exec, ExecError } from "./exec.ts";

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

  it("carries a 12 MiB output of control bytes and many concurrent commands", async () => {
    const big = await exec("head", ["-c", String(12 * 1024 * 1024), "/dev/zero"]);
    assert.equal(big.stdout.length, 12 * 1024 * 1024);
    const all = await Promise.all(Array.from({ length: 30 }, (_, i) => exec("echo", [String(i)])));
    all.forEach((r, i) => assert.equal(r.stdout, `${i}\n`));
  });
});
