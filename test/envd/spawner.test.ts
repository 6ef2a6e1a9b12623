/**
 * One conformance suite over envd's two ways of starting a command (src/envd/process/
 * spawner.ts): the spawn addon (what a sandbox's envd uses) and Node's child_process
 * (without the addon). Both must give commands the same world: pipes, exit and signal,
 * cwd, env and PATH lookup, the user's uid and gid without root's groups, their own
 * session, default signal dispositions, and the same errors.
 */
import { after, describe, test } from "node:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { loadSpawner, nodeSpawner, type PipeChild, type SpawnRequest, type Spawner } from "../../src/envd/process/spawner.ts";

const logged: string[] = [];
const addonSpawner = loadSpawner(join(import.meta.dirname, "..", "..", "dist", "envd"), (msg) => logged.push(msg));
const root = process.getuid?.() === 0;
const dir = mkdtempSync(join(tmpdir(), "spawner-"));
const plain = join(dir, "plain");
writeFileSync(plain, "echo never\n", { mode: 0o644 });
const script = join(dir, "script");
writeFileSync(script, 'echo script "$1"\n', { mode: 0o755 });
after(() => rmSync(dir, { recursive: true, force: true }));

const base = (cmd: string, args: string[] = [], over: Partial<SpawnRequest> = {}): SpawnRequest => ({
  cmd,
  args,
  cwd: "/",
  env: { PATH: "/usr/bin:/bin" },
  uid: process.getuid?.() ?? 0,
  gid: process.getgid?.() ?? 0,
  stdin: false,
  ...over,
});

const text = (s: Readable | null) =>
  new Promise<string>((resolve) => {
    let out = "";
    s?.on("data", (d: Buffer) => (out += d.toString()));
    s?.on("close", () => resolve(out));
  });

type End = [number | null, NodeJS.Signals | null];
async function run(sp: Spawner, req: SpawnRequest, input?: string): Promise<{ out: string; err: string; exit: End; close: End; child: PipeChild; order: string[] }> {
  const child = await sp.start(req);
  const order: string[] = [];
  const exit = new Promise<End>((r) => child.on("exit", (c, s) => (order.push("exit"), r([c, s]))));
  const close = new Promise<End>((r) => child.on("close", (c, s) => (order.push("close"), r([c, s]))));
  const [out, err] = [text(child.stdout), text(child.stderr)];
  if (input !== undefined) child.stdin?.end(input);
  return { out: await out, err: await err, exit: await exit, close: await close, child, order };
}

test("the spawn addon is built and loads (npm run build:envd)", () => {
  assert.deepEqual(logged, []);
});

for (const [name, sp] of [["spawn addon", addonSpawner], ["child_process", nodeSpawner]] as const) {
  describe(`envd spawner: ${name}`, () => {
    test("stdout, stderr and the exit code; exit before close", async () => {
      const r = await run(sp, base("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"]));
      assert.equal(r.out, "out\n");
      assert.equal(r.err, "err\n");
      assert.deepEqual(r.exit, [3, null]);
      assert.deepEqual(r.close, [3, null]);
      assert.deepEqual(r.order, ["exit", "close"]);
      assert.ok((r.child.pid ?? 0) > 0);
    });

    test("a signal that ends it is named", async () => {
      const r = await run(sp, base("/bin/sh", ["-c", "kill -TERM $$"]));
      assert.deepEqual(r.exit, [null, "SIGTERM"]);
    });

    test("stdin: a pipe when asked (EOF on end), /dev/null otherwise", async () => {
      assert.equal((await run(sp, base("/bin/cat", [], { stdin: true }), "abc")).out, "abc");
      const r = await run(sp, base("/bin/cat"));
      assert.equal(r.out, "");
      assert.deepEqual(r.exit, [0, null]);
      assert.equal(r.child.stdin, null);
    });

    test("cwd, env, and PATH lookup in the command's own PATH", async () => {
      const r = await run(sp, base("pwd", [], { cwd: "/tmp", env: { PATH: "/nonexistent:/bin:/usr/bin" } }));
      assert.equal(r.out, "/tmp\n");
      const e = await run(sp, base("sh", ["-c", 'echo "$FOO|$PATH"'], { env: { FOO: "bar baz", PATH: "/usr/bin:/bin" } }));
      assert.equal(e.out, "bar baz|/usr/bin:/bin\n");
    });

    test("its own session and process group, default signal dispositions", async () => {
      const r = await run(sp, base("/bin/sh", ["-c", 'set -- $(cut -d" " -f5,6 /proc/$$/stat); echo "$$ $1 $2"']));
      const [pid, pgid, sid] = r.out.trim().split(" ");
      assert.equal(pgid, pid, "process group leader");
      assert.equal(sid, pid, "session leader");
      // Node ignores SIGPIPE itself; a command must not inherit that (`yes | head` ends).
      const g = await run(sp, base("/bin/grep", ["-E", "^Sig(Ign|Blk)", "/proc/self/status"]));
      assert.equal(g.out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
    });

    test("as another user: its uid and gid, none of root's groups", { skip: !root && "needs root" }, async () => {
      const r = await run(sp, base("/usr/bin/id", [], { uid: 65534, gid: 65534 }));
      assert.match(r.out, /^uid=65534\([^)]*\) gid=65534\([^)]*\) groups=65534\([^)]*\)\n$/);
    });

    test("stdout held by a background child: exit now, close when it lets go", async () => {
      const t0 = Date.now();
      const child = await sp.start(base("/bin/sh", ["-c", "sleep 0.3 & echo hi"]));
      const exitAt = new Promise<number>((r) => child.on("exit", () => r(Date.now() - t0)));
      const closeAt = new Promise<number>((r) => child.on("close", () => r(Date.now() - t0)));
      const out = text(child.stdout);
      child.stderr?.resume();
      assert.ok((await exitAt) < 250, "the shell exits at once");
      assert.ok((await closeAt) >= 250, "close waits for the pipe");
      assert.equal(await out, "hi\n");
    });

    test("many at once: every exit is seen", async () => {
      const rs = await Promise.all(Array.from({ length: 30 }, (_, i) => run(sp, base("/bin/sh", ["-c", `exit ${i % 7}`]))));
      assert.deepEqual(rs.map((r) => r.exit[0]), Array.from({ length: 30 }, (_, i) => i % 7));
    });

    test("a file without #! is run by /bin/sh, as execvp does", async () => {
      const r = await run(sp, base(script, ["a b"]));
      assert.equal(r.out, "script a b\n");
      assert.deepEqual(r.exit, [0, null]);
    });

    test("errors: not found, not executable, too long, bad cwd", async () => {
      const code = async (req: SpawnRequest) => {
        try {
          await sp.start(req);
        } catch (e: unknown) {
          return [(e as NodeJS.ErrnoException).code, (e as Error).message];
        }
        return ["started"];
      };
      assert.deepEqual(await code(base("no-such-command-xyz")), ["ENOENT", "spawn no-such-command-xyz ENOENT"]);
      assert.equal((await code(base(plain)))[0], "EACCES");
      assert.equal((await code(base("/bin/true", ["x".repeat(200 * 1024)])))[0], "E2BIG");
      assert.equal((await code(base("/bin/true", [], { cwd: "/nonexistent-dir" })))[0], "ENOENT");
    });
  });
}
