/**
 * E2B file details and command deadlines end to end (issue 20 items 4, 5, 8): file
 * metadata kept as `user.e2b.*` extended attributes and returned by `files.write`, the
 * filesystem answers E2B's envd gives (remove of a missing path, symlinks, directory
 * sizes), and a command stream ended by its `timeoutMs`. Real stack, unmodified e2b SDK
 * (latest). Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Sandbox, TimeoutError, type ConnectionOpts } from "e2b";
import { Process } from "../../src/gen/process/process_pb.ts";
import { startStack, waitFor, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("E2B file details and command deadlines (e2b SDK)", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let sb: Sandbox;

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
  });
  after(async () => {
    await sb?.kill().catch(() => {});
    await stack?.stop();
  });

  test("metadata: the write answer carries it, xattrs hold it, an upload without it clears it", async () => {
    const path = "/home/user/meta/a.txt";
    const w = await sb.files.write(path, "one", { metadata: { Owner: "js", purpose: "e2e" } });
    assert.deepEqual(w.metadata, { owner: "js", purpose: "e2e" });
    assert.deepEqual((await sb.files.getInfo(path)).metadata, { owner: "js", purpose: "e2e" });
    // Stored as E2B's envd stores it: user.e2b.<key> extended attributes on the file.
    const xattrs = await sb.commands.run(
      `python3 -c "import os; print(sorted((n, os.getxattr('${path}', n).decode()) for n in os.listxattr('${path}')))"`,
    );
    assert.equal(xattrs.stdout.trim(), "[('user.e2b.owner', 'js'), ('user.e2b.purpose', 'e2e')]");

    // Overwriting without X-Metadata-* replaces the whole set: nothing is left.
    const again = await sb.files.write(path, "two");
    assert.equal(again.metadata, undefined);
    assert.equal((await sb.files.getInfo(path)).metadata, undefined);

    // Multipart upload of several files: each entry of the answer carries the metadata.
    const many = await sb.files.write(
      [
        { path: "/home/user/meta/m1.txt", data: "1" },
        { path: "/home/user/meta/m2.txt", data: "2" },
      ],
      { metadata: { batch: "b1" } },
    );
    assert.deepEqual(
      many.map((e) => [e.path, e.metadata]),
      [
        ["/home/user/meta/m1.txt", { batch: "b1" }],
        ["/home/user/meta/m2.txt", { batch: "b1" }],
      ],
    );
    const listed = await sb.files.list("/home/user/meta");
    assert.deepEqual(
      listed.map((e) => [e.name, e.metadata]),
      [
        ["a.txt", undefined],
        ["m1.txt", { batch: "b1" }],
        ["m2.txt", { batch: "b1" }],
      ],
    );
  });

  test("metadata set as user.e2b.* xattrs inside the sandbox shows in getInfo", async () => {
    const path = "/home/user/meta/set-inside.txt";
    await sb.commands.run(
      `echo x > ${path} && python3 -c "import os; os.setxattr('${path}', 'user.e2b.foo', b'bar'); os.setxattr('${path}', 'user.other', b'no')"`,
    );
    assert.deepEqual((await sb.files.getInfo(path)).metadata, { foo: "bar" });
  });

  test("remove of a missing path succeeds, as with E2B's envd", async () => {
    await sb.files.remove("/home/user/never-existed.txt");
    await sb.files.remove("/home/user/never/existed/either");
    assert.equal(await sb.files.exists("/home/user/never-existed.txt"), false);
  });

  test("getInfo of a symlink reports the target's type with symlinkTarget set", async () => {
    await sb.commands.run(
      "mkdir -p /home/user/ln/dir && echo hello > /home/user/ln/file && chmod 640 /home/user/ln/file && ln -s /home/user/ln/file /home/user/ln/to-file && ln -s dir /home/user/ln/to-dir",
    );
    const toFile = await sb.files.getInfo("/home/user/ln/to-file");
    assert.deepEqual([toFile.type, toFile.symlinkTarget, toFile.mode], ["file", "/home/user/ln/file", 0o640]);
    assert.match(toFile.permissions, /^L/);
    const toDir = await sb.files.getInfo("/home/user/ln/to-dir");
    assert.deepEqual([toDir.type, toDir.symlinkTarget], ["dir", "/home/user/ln/dir"]);
    const listed = await sb.files.list("/home/user/ln");
    assert.deepEqual(
      listed.map((e) => [e.name, e.type, e.symlinkTarget]),
      [
        ["dir", "dir", undefined],
        ["file", "file", undefined],
        ["to-dir", "dir", "/home/user/ln/dir"],
        ["to-file", "file", "/home/user/ln/file"],
      ],
    );
  });

  test("a directory's size is what ext4 reports (a multiple of the 4096-byte block), never 0", async () => {
    await sb.files.makeDir("/home/user/empty-dir");
    assert.equal((await sb.files.getInfo("/home/user/empty-dir")).size, 4096);
    const listed = await sb.files.list("/home/user");
    const dir = listed.find((e) => e.name === "empty-dir");
    assert.equal(dir?.size, 4096);
    for (const e of listed.filter((x) => x.type === "dir")) assert.ok(e.size > 0 && e.size % 4096 === 0, `${e.name}: ${e.size}`);
  });

  test("commands.run past its timeoutMs rejects with TimeoutError (the stream ends with deadline_exceeded)", async () => {
    const err = await sb.commands.run("sleep 30", { timeoutMs: 2000 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof TimeoutError, `expected TimeoutError, got ${String(err)}`);
    // The command is killed at its deadline.
    await waitFor(
      async () => !(await sb.commands.list()).some((p) => p.args.includes("sleep 30")),
      "sleep 30 killed at its deadline",
    );
  });

  test("metadata lives on the file: it survives pause → connect (the disk snapshot carries the xattrs)", async () => {
    const path = "/home/user/meta/kept.txt";
    await sb.files.write(path, "k", { metadata: { kept: "yes" } });
    assert.equal(await sb.pause(), true);
    const back = await Sandbox.connect(sb.sandboxId, { ...opts, timeoutMs: 600_000 });
    assert.deepEqual((await back.files.getInfo(path)).metadata, { kept: "yes" });
  });

  test("the Start stream itself ends with deadline_exceeded at Connect-Timeout-Ms (a client that leaves the deadline to the server)", async () => {
    // The SDK also enforces timeoutMs locally and usually wins the race; a client that
    // only sends the header sees what envd ends the stream with.
    const client = createClient(Process, createConnectTransport({ baseUrl: stack.sandboxUrl, httpVersion: "1.1" }));
    const token = (sb as unknown as { envdAccessToken?: string }).envdAccessToken;
    const headers: Record<string, string> = {
      "E2b-Sandbox-Id": sb.sandboxId,
      "E2b-Sandbox-Port": "49983",
      "Connect-Timeout-Ms": "1500",
    };
    if (token) headers["X-Access-Token"] = token;
    const seen: (string | undefined)[] = [];
    const err = await (async () => {
      for await (const r of client.start({ process: { cmd: "/bin/bash", args: ["-c", "sleep 31"] } }, { headers }))
        seen.push(r.event?.event.case);
    })().then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.deepEqual(seen, ["start"]);
    assert.ok(
      err instanceof ConnectError && err.code === Code.DeadlineExceeded,
      `expected deadline_exceeded, got ${String(err)}`,
    );
    await waitFor(
      async () => !(await sb.commands.list()).some((p) => p.args.includes("sleep 31")),
      "sleep 31 killed at its deadline",
    );
  });
});
