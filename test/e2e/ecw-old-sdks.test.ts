/**
 * ECW end to end with SDKs older than sandboxUrl: the last 1.x (npm alias e2b-1) and 2.0.3
 * (e2b-20). They have no apiUrl or sandboxUrl: they call https://api.<domain> and
 * https://<port>-<id>.<domain>, so a real deployment puts a TLS front with wildcard DNS
 * before SPACE. This test plays that front inside the process: fetch is wrapped to send
 * api.<domain> to the API and <port>-<id>.<domain> to the gateway's path form.
 * 1.x: v1 paths (POST /sandboxes, `secure` in the body); connect() reads the envd token
 * from GET /sandboxes/{id}. 2.0: connect() sets the timeout and resumes (POST
 * /sandboxes/{id}/resume) only when that fails, so a paused sandbox's timeout must be 404.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, CommandExitError } from "e2b-1";
import { Sandbox as Sandbox20 } from "e2b-20";
import type { Stack } from "../support/stack.ts";
import { startStackBehindFront } from "../support/wildcard-front.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;
const DOMAIN = "space.test";

describe("ECW with e2b SDKs before sandboxUrl (1.13, 2.0)", { skip, timeout: 15 * 60_000 }, () => {
  let stack: Stack;
  let restoreFetch = (): void => {};
  const created: { kill(): Promise<unknown> }[] = [];
  const opts = () => ({ apiKey: stack.apiKey, domain: DOMAIN, requestTimeoutMs: 120_000 });

  before(async () => {
    // The front this test plays serves DOMAIN; the deployment says so (create answers name it).
    ({ stack, restoreFetch } = await startStackBehindFront(DOMAIN));
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    restoreFetch();
    await stack?.stop();
  });

  for (const secure of [false, true]) {
    test(`secure=${secure}: create → commands → files → watch → list → connect → kill`, async () => {
      const sb = await Sandbox.create("base", { ...opts(), secure, metadata: { v: "1", "a b": "c&d" }, envs: { FOO: "one" }, timeoutMs: 120_000 });
      created.push(sb);
      const r = await sb.commands.run("echo $FOO; echo e >&2; whoami");
      assert.deepEqual([r.stdout, r.stderr, r.exitCode], ["one\nuser\n", "e\n", 0]);
      await assert.rejects(sb.commands.run("exit 4"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 4);
      const bg = await sb.commands.run("sleep 100", { background: true });
      assert.equal(await bg.kill(), true);

      await sb.files.write("/home/user/d/a.txt", "alpha");
      await sb.files.write([{ path: "/home/user/d/b.bin", data: new Uint8Array([1, 2, 3]).buffer }]);
      assert.equal(await sb.files.read("/home/user/d/a.txt"), "alpha");
      assert.deepEqual(Array.from(await sb.files.read("/home/user/d/b.bin", { format: "bytes" })), [1, 2, 3]);
      assert.deepEqual((await sb.files.list("/home/user/d")).map((e) => e.name), ["a.txt", "b.bin"]);
      assert.equal(await sb.files.makeDir("/home/user/d/x"), true);
      assert.equal((await sb.files.rename("/home/user/d/a.txt", "/home/user/d/c.txt")).name, "c.txt");
      assert.equal((await sb.files.getInfo("/home/user/d/c.txt")).size, 5);
      assert.equal(await sb.files.exists("/home/user/d/a.txt"), false);

      const seen: string[] = [];
      const w = await sb.files.watchDir("/home/user/d", (e) => void seen.push(`${e.name}:${e.type}`));
      await sb.files.write("/home/user/d/w.txt", "w");
      for (let i = 0; i < 50 && !seen.includes("w.txt:write"); i++) await new Promise((res) => setTimeout(res, 100));
      await w.stop();
      assert.ok(seen.includes("w.txt:create") && seen.includes("w.txt:write"), seen.join(","));

      const info = await sb.getInfo();
      assert.deepEqual([info.sandboxId, info.templateId, info.metadata], [sb.sandboxId, "base", { v: "1", "a b": "c&d" }]);
      const listed = await Sandbox.list({ ...opts(), query: { metadata: { "a b": "c&d" } } });
      assert.ok(listed.some((s) => s.sandboxId === sb.sandboxId));

      // connect() in 1.x is GET /sandboxes/{id}: the envd token must come from there.
      const again = await Sandbox.connect(sb.sandboxId, opts());
      assert.equal((await again.commands.run("cat /home/user/d/c.txt")).stdout, "alpha");
      await sb.setTimeout(300_000);
      assert.equal((await sb.getMetrics()).length >= 1, true);

      await sb.kill();
      assert.equal(await Sandbox.kill(sb.sandboxId, opts()), false);
      assert.equal(await sb.isRunning(), false);
    });
  }

  test("2.0.3: pause, then connect resumes it with files and processes", async () => {
    const sb = await Sandbox20.create("base", { ...opts(), timeoutMs: 120_000 });
    created.push(sb);
    await sb.files.write("/home/user/keep.txt", "kept");
    await sb.commands.run("sleep 1000", { background: true });
    assert.equal(await Sandbox20.betaPause(sb.sandboxId, opts()), true);
    assert.equal((await Sandbox20.getInfo(sb.sandboxId, opts())).state, "paused");
    const again = await Sandbox20.connect(sb.sandboxId, opts());
    assert.equal(await again.files.read("/home/user/keep.txt"), "kept");
    assert.ok((await again.commands.list()).some((p) => p.args.includes("sleep 1000")), "the background process survived");
    assert.equal((await Sandbox20.getInfo(sb.sandboxId, opts())).state, "running");
    await again.kill();
    await assert.rejects(Sandbox20.connect(sb.sandboxId, opts()));
  });
});
