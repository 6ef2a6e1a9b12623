/**
 * The gateway's routes end to end, through the unmodified e2b SDK on a real `space up`:
 * a sandbox is reachable the moment an API call hands it back (connect after pause,
 * create with `secure: true` and its signed file URLs): no miss or stale list the
 * gateway cached before the state change is served after it; and `getHost(port)` reaches
 * a server in the sandbox from this machine with `space up`'s defaults. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, type ConnectionOpts, type SandboxOpts } from "e2b";
import { startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;

describe("gateway routes with the e2b SDK", { skip, timeout: 10 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: string[] = [];
  const create = async (o: Partial<SandboxOpts> = {}) => {
    const sb = await Sandbox.create({ ...opts, ...o });
    created.push(sb.sandboxId);
    return sb;
  };

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  });
  after(async () => {
    await Promise.allSettled(created.map((id) => Sandbox.kill(id, opts)));
    await stack?.stop();
  });

  test("pause → a call while paused fails → connect → commands.run and files.read succeed at once", async () => {
    const sb = await create();
    await sb.files.write("/home/user/kept.txt", "kept");
    // A process before the pause: a sandbox restored without ever having spawned one
    // loses envd at its first spawn (a separate bug, reported; not the route's).
    assert.equal((await sb.commands.run("echo before")).stdout, "before\n");
    assert.equal(await sb.pause(), true);
    // A call while paused is refused (and must not be remembered past the resume).
    await assert.rejects(sb.files.read("/home/user/kept.txt"));
    const back = await Sandbox.connect(sb.sandboxId, opts);
    const r = await back.commands.run("echo back");
    assert.equal(r.stdout, "back\n");
    assert.equal(await back.files.read("/home/user/kept.txt"), "kept");
  });

  test("create with secure: true → its signed download and upload URLs work at once", async () => {
    // Signed traffic for another secure sandbox keeps the gateway's list of secure
    // sandboxes fresh right up to the second create, as a busy gateway's would be.
    const other = await create({ secure: true });
    await other.files.write("/home/user/o.txt", "o");
    const otherUrl = await other.downloadUrl("/home/user/o.txt");
    let busy = true;
    const traffic = (async () => {
      while (busy) assert.equal((await fetch(otherUrl)).status, 200);
    })();
    try {
      for (let i = 0; i < 3; i++) {
        const sb = await create({ secure: true });
        const up = await sb.uploadUrl("/home/user/signed.txt");
        const form = new FormData();
        form.append("file", new Blob([`signed ${i}`]), "/home/user/signed.txt");
        const upRes = await fetch(up, { method: "POST", body: form });
        assert.equal(upRes.status, 200, await upRes.clone().text());
        const downRes = await fetch(await sb.downloadUrl("/home/user/signed.txt"));
        assert.equal(downRes.status, 200, await downRes.clone().text());
        assert.equal(await downRes.text(), `signed ${i}`);
      }
    } finally {
      busy = false;
      await traffic;
    }
  });

  test("getHost(8000) with nothing configured: fetch reaches a server in the sandbox", async () => {
    const sb = await create();
    await sb.files.write("/home/user/www/index.html", "hello from the sandbox");
    await sb.commands.run("cd /home/user/www && python3 -m http.server 8000", { background: true });
    const host = sb.getHost(8000);
    assert.match(host, new RegExp(`^8000-${sb.sandboxId}\\.localhost:\\d+$`));
    const body = await waitFor(
      async () => {
        const r = await fetch(`http://${host}/index.html`).catch(() => null);
        return r?.status === 200 ? r.text() : null;
      },
      `a server on ${host}`,
      30_000,
    );
    assert.equal(body, "hello from the sandbox");
  });

  test("getHost(port) reaches a server bound to the sandbox's loopback only", async () => {
    const sb = await create();
    await sb.files.write("/home/user/lo/index.html", "hello from 127.0.0.1");
    await sb.commands.run("cd /home/user/lo && python3 -m http.server 8001 --bind 127.0.0.1", { background: true });
    const host = sb.getHost(8001);
    const body = await waitFor(
      async () => {
        const r = await fetch(`http://${host}/index.html`).catch(() => null);
        return r?.status === 200 ? r.text() : null;
      },
      `a loopback server on ${host}`,
      30_000,
    );
    assert.equal(body, "hello from 127.0.0.1");
  });
});
