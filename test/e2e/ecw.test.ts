/**
 * ECW end to end: the real stack (`space up`: api + gateway + controller + node with
 * runc), driven by the unmodified e2b SDK (latest 2.x here; ecw-v1.test.ts covers one
 * version <= 2.50 and its v1 paths). Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Sandbox, SandboxNotFoundError, NotFoundError, CommandExitError, type ConnectionOpts, type SandboxOpts } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("ECW with the e2b SDK (latest)", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];
  const create = async (o: Partial<SandboxOpts> = {}) => {
    const sb = await Sandbox.create({ ...opts, ...o });
    created.push(sb);
    return sb;
  };

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  test("create → commands.run('echo hi') → info → kill", async () => {
    const sb = await create({ metadata: { suite: "ecw", "a b": "c&d" } });
    const r = await sb.commands.run("echo hi");
    assert.equal(r.stdout, "hi\n");
    assert.equal(r.exitCode, 0);
    const info = await sb.getInfo();
    assert.equal(info.sandboxId, sb.sandboxId);
    assert.equal(info.state, "running");
    assert.equal(info.metadata["a b"], "c&d");
    assert.equal(await sb.isRunning(), true);
    await assert.rejects(sb.commands.run("exit 3"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 3);
    const who = await sb.commands.run("whoami; echo $HOME; pwd");
    assert.equal(who.stdout, "user\n/home/user\n/home/user\n");
    // The login shell's PATH, as Debian's /etc/profile sets it per user (the base template
    // has it read bash's EUID instead of running `id -u`: the same answer).
    assert.equal((await sb.commands.run("echo $PATH")).stdout, "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games\n");
    assert.equal((await sb.commands.run("echo $PATH", { user: "root" })).stdout, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");
    assert.equal((await sb.commands.run("sh -lc 'echo $PATH'")).stdout, "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games\n");
    await sb.kill();
    assert.equal(await sb.isRunning(), false);
  });

  test("commands: background, stdin, kill, reattach by pid, PTY", async () => {
    const sb = await create();
    const bg = await sb.commands.run("sleep 1; echo done", { background: true });
    const done = await bg.wait();
    assert.equal(done.stdout, "done\n");

    const cat = await sb.commands.run("cat", { background: true, stdin: true });
    await sb.commands.sendStdin(cat.pid, "hello stdin\n");
    await sb.commands.closeStdin(cat.pid);
    assert.equal((await cat.wait()).stdout, "hello stdin\n");

    const long = await sb.commands.run("for i in $(seq 1 100); do echo tick $i; sleep 0.1; done", { background: true });
    await long.disconnect();
    const again = await sb.commands.connect(long.pid);
    assert.ok(await sb.commands.kill(long.pid));
    await assert.rejects(again.wait());
    assert.equal(await sb.commands.kill(999_999), false);

    let ptyOut = "";
    const pty = await sb.pty.create({ cols: 80, rows: 24, onData: (d) => void (ptyOut += Buffer.from(d).toString()) });
    await sb.pty.sendInput(pty.pid, new TextEncoder().encode("echo pty-$((40+2))\nexit\n"));
    await pty.wait().catch(() => {});
    assert.match(ptyOut, /pty-42/);
  });

  test("files: write, read, list, exists, getInfo, rename, remove, watch, 10 MiB binary, signed URLs", async () => {
    const sb = await create();
    await sb.files.write("/home/user/dir/a.txt", "alpha");
    assert.equal(await sb.files.read("/home/user/dir/a.txt"), "alpha");
    assert.deepEqual((await sb.files.list("/home/user/dir")).map((e) => e.name), ["a.txt"]);
    assert.equal(await sb.files.exists("/home/user/dir/a.txt"), true);
    const info = await sb.files.getInfo("dir/a.txt");
    assert.equal(info.size, 5);
    assert.equal(info.type, "file");

    const events: string[] = [];
    const watch = await sb.files.watchDir("/home/user/dir", (e) => void events.push(`${e.type}:${e.name}`));
    await sb.files.write("/home/user/dir/b.txt", "beta");
    await waitFor(() => events.some((e) => e.endsWith(":b.txt")), "watch event for b.txt");
    await watch.stop();

    await sb.files.rename("/home/user/dir/a.txt", "/home/user/dir/c.txt");
    assert.equal(await sb.files.exists("/home/user/dir/a.txt"), false);
    await sb.files.remove("/home/user/dir/c.txt");
    assert.equal(await sb.files.exists("/home/user/dir/c.txt"), false);

    const big = randomBytes(10 * 1024 * 1024);
    await sb.files.write("/home/user/big.bin", new Blob([big]));
    const back = await sb.files.read("/home/user/big.bin", { format: "bytes" });
    assert.equal(Buffer.compare(Buffer.from(back), big), 0);
    const sum = await sb.commands.run("sha256sum /home/user/big.bin | cut -d' ' -f1");
    const { createHash } = await import("node:crypto");
    assert.equal(sum.stdout.trim(), createHash("sha256").update(big).digest("hex"));

    // Signed URLs carry no routing header: the gateway finds the sandbox by signature.
    const up = await sb.uploadUrl("/home/user/signed.txt");
    const form = new FormData();
    form.append("file", new Blob(["signed!"]), "/home/user/signed.txt");
    const upRes = await fetch(up, { method: "POST", body: form });
    assert.equal(upRes.status, 200, await upRes.clone().text());
    const down = await sb.downloadUrl("/home/user/signed.txt");
    const downRes = await fetch(down);
    assert.equal(downRes.status, 200);
    assert.equal(await downRes.text(), "signed!");
    const forged = new URL(down);
    forged.searchParams.set("signature", "v1_forged");
    assert.equal((await fetch(forged)).status, 401);
  });

  test("list: pagination with limit and metadata filters", async () => {
    const tag = randomBytes(4).toString("hex");
    const sbs = await Promise.all([0, 1, 2].map((i) => create({ metadata: { tag, "k v": i === 1 ? "x&y" : "z" } })));
    const seen: string[] = [];
    const pager = Sandbox.list({ ...opts, limit: 2, query: { metadata: { tag } } });
    while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId));
    assert.deepEqual([...seen].sort(), sbs.map((s) => s.sandboxId).sort());
    const one = await Sandbox.list({ ...opts, query: { metadata: { tag, "k v": "x&y" } } }).nextItems();
    assert.deepEqual(one.map((s) => s.sandboxId), [sbs[1]!.sandboxId]);
    const paused = await Sandbox.list({ ...opts, query: { state: ["paused"], metadata: { tag } } }).nextItems();
    assert.equal(paused.length, 0);
  });

  test("setTimeout auto-kills; kill of unknown id is false; connect of killed raises not found", async () => {
    const sb = await create();
    await sb.setTimeout(2_000);
    const t0 = Date.now();
    await waitFor(async () => !(await sb.isRunning().catch(() => false)) && !(await Sandbox.list(opts).nextItems()).some((s) => s.sandboxId === sb.sandboxId), "auto-kill", 10_000);
    assert.ok(Date.now() - t0 < 5_000, `auto-kill took ${Date.now() - t0} ms`);
    assert.equal(await Sandbox.kill(sb.sandboxId, opts), false);
    assert.equal(await Sandbox.kill("aaaaaaaaaaaaaaaaaaaa", opts), false);
    await assert.rejects(Sandbox.connect(sb.sandboxId, opts), (e: unknown) => e instanceof SandboxNotFoundError || e instanceof NotFoundError);
  });

  test("connect to a running sandbox returns it; timeout is only extended", async () => {
    const sb = await create({ timeoutMs: 600_000 });
    const before = (await sb.getInfo()).endAt.getTime();
    const again = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 10_000 });
    assert.equal((await again.commands.run("echo again")).stdout, "again\n");
    assert.equal((await sb.getInfo()).endAt.getTime(), before);
    const m = await sb.getMetrics();
    assert.ok(Array.isArray(m));
  });

  test("public port through the gateway (header and path forms); killed sandbox → 502", async () => {
    const sb = await create();
    await sb.commands.run("mkdir -p /tmp/www && echo served > /tmp/www/index.html && cd /tmp/www && python3 -m http.server 8080 --bind 0.0.0.0", { background: true });
    const viaHeader = await waitFor(async () => {
      const r = await fetch(`${stack.sandboxUrl}/index.html`, { headers: { "E2b-Sandbox-Id": sb.sandboxId, "E2b-Sandbox-Port": "8080" } });
      return r.status === 200 ? r.text() : null;
    }, "http.server on 8080", 15_000);
    assert.equal(viaHeader, "served\n");
    const viaPath = await fetch(`${stack.sandboxUrl}/sandboxes/${sb.sandboxId}/ports/8080/index.html`);
    assert.equal(await viaPath.text(), "served\n");
    await sb.kill();
    const dead = await fetch(`${stack.sandboxUrl}/index.html`, { headers: { "E2b-Sandbox-Id": sb.sandboxId, "E2b-Sandbox-Port": "8080" } });
    assert.equal(dead.status, 502);
    assert.deepEqual(await dead.json(), { message: "The sandbox was not found", sandboxId: sb.sandboxId, code: 502 });
  });

  test("tenant isolation: a second tenant sees nothing of the first", async () => {
    const admin = (path: string, body: unknown) =>
      fetch(`${stack.apiUrl}/admin/api/v1${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }).then(async (r) => {
        assert.equal(r.status, 201, await r.clone().text());
        return r.json() as Promise<Record<string, string>>;
      });
    const tenant = await admin("/tenants", { name: `t-${randomBytes(4).toString("hex")}` });
    const key = await admin(`/tenants/${tenant.id}/keys`, {});
    const other = { ...opts, apiKey: key.key! };
    const sb = await create();
    await assert.rejects(Sandbox.getInfo(sb.sandboxId, other), (e: unknown) => e instanceof SandboxNotFoundError || e instanceof NotFoundError);
    assert.equal(await Sandbox.kill(sb.sandboxId, other), false);
    assert.equal((await Sandbox.list(other).nextItems()).length, 0);
    assert.equal(await sb.isRunning(), true);
    await assert.rejects(Sandbox.list({ ...opts, apiKey: "e2b_0000000000000000000000000000000000000000" }).nextItems(), /401|Invalid API key|authentic/i);
  });

  test("disk below the template rootfs is refused quickly with 400 naming the sizes", async () => {
    const t0 = Date.now();
    await assert.rejects(
      Sandbox.create({ ...opts, metadata: { "space.resources": JSON.stringify({ disk_mib: 64 }) } }),
      (e: unknown) => /400/.test(String(e)) && /64/.test(String(e)) && /rootfs/i.test(String(e)),
    );
    assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
  });

  // pause (= suspend), connect (= restore) and fork: test/e2e/snapshots.test.ts.
});
