import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, rmSync, statSync, symlinkSync, writeFileSync, appendFileSync, renameSync, chmodSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { EventType, FileType, type WatchDirResponse } from "../../src/gen/filesystem/filesystem_pb.ts";
import { ensureTestUser, startEnvd, TEST_USER, waitFor, type RunningEnvd } from "./harness.ts";

const codeOf = (code: Code) => (e: unknown) => {
  assert.equal(ConnectError.from(e).code, code, String(e));
  return true;
};

describe("envd filesystem.Filesystem", () => {
  let envd: RunningEnvd;
  let user: ReturnType<typeof ensureTestUser>;
  let base: string;
  before(async () => {
    user = ensureTestUser();
    envd = await startEnvd();
    base = join(user.home, `fs-${process.pid}`);
    rmSync(base, { recursive: true, force: true });
  });
  after(async () => {
    await envd?.stop();
    rmSync(base, { recursive: true, force: true });
  });

  test("MakeDir creates parents owned by the user; already_exists; Stat fields", async () => {
    const fs = envd.fs();
    const rel = `fs-${process.pid}/a/b/c`; // relative: resolves against the user's home
    const r = await fs.makeDir({ path: rel });
    assert.equal(r.entry!.path, join(base, "a/b/c"));
    assert.equal(r.entry!.type, FileType.DIRECTORY);
    assert.equal(r.entry!.owner, TEST_USER);
    for (const p of [base, join(base, "a"), join(base, "a/b/c")]) assert.equal(statSync(p).uid, user.uid, p);
    await assert.rejects(fs.makeDir({ path: rel }), codeOf(Code.AlreadyExists));

    writeFileSync(join(base, "f.txt"), "12345");
    chmodSync(join(base, "f.txt"), 0o644);
    const st = await fs.stat({ path: `~/fs-${process.pid}/f.txt` });
    assert.equal(st.entry!.name, "f.txt");
    assert.equal(st.entry!.type, FileType.FILE);
    assert.equal(st.entry!.size, 5n);
    assert.equal(st.entry!.mode, 0o644);
    assert.equal(st.entry!.permissions, "-rw-r--r--");
    assert.equal(st.entry!.owner, "root");
    assert.equal(st.entry!.group, "root");
    assert.ok(st.entry!.modifiedTime!.seconds > 0n);
    const d = await fs.stat({ path: base });
    assert.equal(d.entry!.permissions.slice(0, 1), "d");
    await assert.rejects(fs.stat({ path: join(base, "missing") }), codeOf(Code.NotFound));
  });

  test("ListDir: depth and sort order; not a dir; missing", async () => {
    const fs = envd.fs({ binary: true });
    const root = join(base, "list");
    mkdirSync(join(root, "z/deep/deeper"), { recursive: true });
    writeFileSync(join(root, "b.txt"), "");
    writeFileSync(join(root, "a.txt"), "");
    writeFileSync(join(root, "z/deep/x"), "");
    const one = await fs.listDir({ path: root, depth: 1 });
    assert.deepEqual(
      one.entries.map((e) => e.name),
      ["a.txt", "b.txt", "z"],
    );
    const three = await fs.listDir({ path: root, depth: 3 });
    assert.deepEqual(
      three.entries.map((e) => e.path.slice(root.length + 1)),
      ["a.txt", "b.txt", "z", "z/deep", "z/deep/deeper", "z/deep/x"],
    );
    await assert.rejects(fs.listDir({ path: join(root, "a.txt"), depth: 1 }), codeOf(Code.InvalidArgument));
    await assert.rejects(fs.listDir({ path: join(root, "nope"), depth: 1 }), codeOf(Code.NotFound));
  });

  test("Move and Remove; move of a missing path not_found, its remove succeeds (as E2B's RemoveAll)", async () => {
    const fs = envd.fs();
    writeFileSync(join(base, "m1"), "x");
    const r = await fs.move({ source: join(base, "m1"), destination: join(base, "moved/sub/m2") });
    assert.equal(r.entry!.path, join(base, "moved/sub/m2"));
    assert.equal(statSync(join(base, "moved")).uid, user.uid);
    await assert.rejects(fs.move({ source: join(base, "m1"), destination: join(base, "m3") }), codeOf(Code.NotFound));
    await fs.remove({ path: join(base, "moved") });
    await assert.rejects(fs.stat({ path: join(base, "moved") }), codeOf(Code.NotFound));
    await fs.remove({ path: join(base, "moved") });
    await fs.remove({ path: join(base, "never/was/here") });
  });

  test("symlinks and path tricks do not crash anything", async () => {
    const fs = envd.fs();
    const t = join(base, "target.txt");
    writeFileSync(t, "t");
    symlinkSync(t, join(base, "link"));
    symlinkSync(join(base, "link-loop"), join(base, "link-loop"));
    symlinkSync("/nonexistent/x", join(base, "dangling"));
    // A symlink reports its target's type (as E2B's envd); loops and dangling ones stay symlinks.
    const l = await fs.stat({ path: join(base, "link") });
    assert.equal(l.entry!.type, FileType.FILE);
    assert.equal(l.entry!.symlinkTarget, t);
    assert.equal(l.entry!.permissions[0], "L");
    const loop = await fs.stat({ path: join(base, "link-loop") });
    assert.equal(loop.entry!.type, FileType.SYMLINK);
    const dangling = await fs.stat({ path: join(base, "dangling") });
    assert.deepEqual([dangling.entry!.type, dangling.entry!.symlinkTarget], [FileType.SYMLINK, "/nonexistent/x"]);
    const up = await fs.stat({ path: "../../../../../../../.." });
    assert.equal(up.entry!.path, "/");
    const dots = await fs.stat({ path: `~/../${TEST_USER}/./fs-${process.pid}/target.txt` });
    assert.equal(dots.entry!.path, t);
    const ls = await fs.listDir({ path: base, depth: 5 });
    assert.ok(ls.entries.some((e) => e.name === "link-loop"));
    await assert.rejects(fs.makeDir({ path: join(base, "target.txt/sub") }), (e: unknown) => {
      assert.ok([Code.InvalidArgument, Code.AlreadyExists, Code.NotFound].includes(ConnectError.from(e).code));
      return true;
    });
    const h = await fetch(`${envd.url}/health`);
    assert.equal(h.status, 204);
  });

  test("WatchDir: start first, then create/write/rename/remove, includeEntry", async () => {
    const fs = envd.fs({ keepaliveS: 0.2 });
    const dir = join(base, "watch");
    mkdirSync(join(dir, "sub"), { recursive: true });
    const ac = new AbortController();
    const got: WatchDirResponse["event"][] = [];
    const done = (async () => {
      try {
        for await (const m of fs.watchDir({ path: dir, recursive: true, includeEntry: true }, { signal: ac.signal }))
          got.push(m.event);
      } catch (e: unknown) {
        if (!ac.signal.aborted) throw e;
      }
    })();
    await waitFor(() => got.length > 0, 3000, "start event");
    assert.equal(got[0]!.case, "start");
    const events = () =>
      got.filter((e) => e.case === "filesystem").map((e) => `${EventType[e.value!.type as EventType]}:${e.value!.name}`);
    writeFileSync(join(dir, "a.txt"), "1");
    await waitFor(() => events().includes("CREATE:a.txt"), 3000, "create");
    appendFileSync(join(dir, "a.txt"), "2");
    await waitFor(() => events().includes("WRITE:a.txt"), 3000, "write");
    renameSync(join(dir, "a.txt"), join(dir, "b.txt"));
    await waitFor(() => events().includes("RENAME:a.txt") && events().includes("CREATE:b.txt"), 3000, "rename");
    rmSync(join(dir, "b.txt"));
    await waitFor(() => events().includes("REMOVE:b.txt"), 3000, "remove");
    writeFileSync(join(dir, "sub/nested.txt"), "n");
    await waitFor(() => events().includes("CREATE:sub/nested.txt"), 3000, "recursive create");
    const withEntry = got.find((e) => e.case === "filesystem" && e.value!.name === "sub/nested.txt");
    assert.equal(withEntry!.case === "filesystem" && withEntry!.value!.entry?.name, "nested.txt");
    await waitFor(() => got.some((e) => e.case === "keepalive"), 3000, "keepalive");
    ac.abort();
    await done;
  });

  test("WatchDir errors: missing dir not_found, file invalid_argument", async () => {
    const fs = envd.fs();
    const drain = async (path: string) => {
      for await (const _ of fs.watchDir({ path, recursive: false })) void _;
    };
    await assert.rejects(drain(join(base, "no-such-dir")), codeOf(Code.NotFound));
    writeFileSync(join(base, "plain"), "");
    await assert.rejects(drain(join(base, "plain")), codeOf(Code.InvalidArgument));
  });

  test("CreateWatcher / GetWatcherEvents / RemoveWatcher", async () => {
    const fs = envd.fs();
    const dir = join(base, "poll");
    mkdirSync(dir, { recursive: true });
    const { watcherId } = await fs.createWatcher({ path: dir, recursive: false });
    assert.ok(watcherId);
    writeFileSync(join(dir, "p.txt"), "p");
    const names = await waitFor(
      async () => {
        const r = await fs.getWatcherEvents({ watcherId });
        return r.events.find((e) => e.name === "p.txt" && e.type === EventType.CREATE);
      },
      3000,
      "polled create",
    );
    assert.ok(names);
    await fs.removeWatcher({ watcherId });
    await assert.rejects(fs.getWatcherEvents({ watcherId }), codeOf(Code.NotFound));
    await assert.rejects(fs.createWatcher({ path: join(base, "nope") }), codeOf(Code.NotFound));
  });
});
