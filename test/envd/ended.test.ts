import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { DetachedOutput, EndedProcesses } from "../../src/envd/process/ended.ts";
import { ENDED_PROCESSES_PATH, EndedProcessSchema } from "../../src/contract/ended-process.ts";
import { ProcessManager } from "../../src/envd/process/manager.ts";
import { loadSpawner } from "../../src/envd/process/spawner.ts";
import { startEnvd, waitFor, type RunningEnvd } from "./harness.ts";

const bash = (cmd: string) => ({ cmd: "/bin/bash", args: ["-c", cmd], envs: {} });
const exit = (code: number) => ({ exitCode: code, exited: true, status: `exit status ${code}`, error: code ? `exit status ${code}` : undefined });

describe("envd: record of ended tagged processes", () => {
  test("bounded by count (oldest dropped) and by age", () => {
    let now = Date.parse("2026-01-01T00:00:00Z");
    const rec = new EndedProcesses(3, 60_000, () => now);
    for (let i = 0; i < 5; i++) rec.record(`t${i}`, 100 + i, exit(i), undefined);
    assert.equal(rec.size, 3);
    assert.equal(rec.get("t0"), undefined);
    assert.equal(rec.get("t1"), undefined);
    assert.equal(rec.get("t4")?.exit_code, 4);
    now += 30_000;
    rec.record("late", 200, exit(9), undefined);
    now += 31_000;
    assert.equal(rec.get("t4"), undefined, "older than the ttl");
    assert.equal(rec.get("late")?.pid, 200);
    assert.equal(rec.size, 1);
  });

  test("detached output keeps its last bytes, in order, and counts what it dropped", () => {
    const d = new DetachedOutput(10);
    d.push("stdout", Buffer.from("abcdef"));
    d.push("stderr", Buffer.from("ghij"));
    d.push("stdout", Buffer.from("klm"));
    assert.equal(d.dropped, 3);
    assert.deepEqual(d.chunks.map((c) => [c.stream, c.data.toString()]), [["stdout", "def"], ["stderr", "ghij"], ["stdout", "klm"]]);
  });

  test("the manager records tagged processes only", async () => {
    const m = new ProcessManager(process.cwd(), loadSpawner(process.cwd(), () => {}));
    const user = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
    const run = async (tag: string | undefined, cmd: string) => {
      const { proc } = await m.start({ config: { ...bash(cmd), cwd: undefined }, user, cwd: "/", env: { PATH: "/usr/bin:/bin" }, tag, stdin: false, pty: undefined, timeoutMs: undefined });
      await waitFor(() => proc.endInfo && !m.has(proc.pid), 10_000, `pid ${proc.pid} to end`);
      return proc.pid;
    };
    await run(undefined, "exit 4");
    assert.equal(m.ended.size, 0, "untagged: nothing kept");
    const pid = await run("job", "exit 5");
    assert.deepEqual(
      { ...m.ended.get("job"), ended_at: "", detached_output: [] },
      { tag: "job", pid, exit_code: 5, exited: true, status: "exit status 5", error: "exit status 5", ended_at: "", detached_output: [], detached_output_dropped_bytes: 0 },
    );
  });

  describe("over envd's HTTP port", () => {
    let envd: RunningEnvd;
    const token = "tok-" + randomBytes(8).toString("hex");
    before(async () => {
      envd = await startEnvd();
      // The node sets the token at start (POST /init), as for any secure sandbox.
      const r = await fetch(`${envd.url}/init`, { method: "POST", body: JSON.stringify({ accessToken: token }) });
      assert.equal(r.status, 204);
    });
    after(async () => {
      await envd?.stop();
    });
    const get = (tag: string, tok: string | undefined = token) =>
      fetch(`${envd.url}${ENDED_PROCESSES_PATH}?tag=${encodeURIComponent(tag)}`, { headers: tok ? { "x-access-token": tok } : {} });

    test("a tagged process that ended unwatched: status by tag; E2B's List/Connect still forget it", async () => {
      const c = envd.process({ token });
      const tag = "cmd-" + randomBytes(4).toString("hex");
      const ac = new AbortController();
      const it = c.start({ process: bash("echo early; sleep 1; echo late; echo err >&2; kill -TERM $$"), tag, stdin: false }, { signal: ac.signal })[Symbol.asyncIterator]();
      const first = await it.next();
      const pid = (first.value as { event: { event: { value: { pid: number } } } }).event.event.value.pid;
      const early = await it.next();
      assert.equal((early.value as { event: { event: { case: string } } }).event.event.case, "data");
      ac.abort(); // detach: nobody listens when it ends
      await it.return?.(undefined).catch(() => {});
      const res = await waitFor(async () => {
        const r = await get(tag);
        return r.status === 200 ? r : (await r.body?.cancel(), undefined);
      }, 10_000, "the ended record");
      const rec = EndedProcessSchema.parse(await res.json());
      assert.equal(rec.pid, pid);
      assert.equal(rec.tag, tag);
      assert.equal(rec.exited, false);
      assert.equal(rec.exit_code, -1);
      assert.match(rec.status, /^signal: terminated/);
      assert.ok(Math.abs(Date.parse(rec.ended_at) - Date.now()) < 60_000);
      const detached = rec.detached_output.map((o) => [o.stream, Buffer.from(o.data, "base64").toString()]);
      assert.deepEqual(detached.slice(-2), [["stdout", "late\n"], ["stderr", "err\n"]], "output written while detached is kept");
      assert.ok(!detached.some(([, d]) => d!.includes("early")), "output a stream received is not kept");

      const { processes } = await c.list({});
      assert.ok(!processes.some((p) => p.tag === tag), "List lists running processes only");
      await assert.rejects(
        (async () => {
          for await (const _ of c.connect({ process: { selector: { case: "tag", value: tag } } }));
        })(),
        (e: unknown) => ConnectError.from(e).code === Code.NotFound,
      );

      const ok = await c.start({ process: bash("exit 6"), tag: tag + "-b", stdin: false });
      for await (const _ of ok);
      const rec2 = EndedProcessSchema.parse(await (await get(tag + "-b")).json());
      assert.equal(rec2.exit_code, 6);
      assert.equal(rec2.exited, true);
    });

    test("unknown tag is 404, no tag is 400, no token is 401", async () => {
      assert.equal((await get("never-ran")).status, 404);
      const noTag = await fetch(`${envd.url}${ENDED_PROCESSES_PATH}`, { headers: { "x-access-token": token } });
      assert.equal(noTag.status, 400);
      assert.equal((await get("never-ran", "wrong")).status, 401);
      assert.equal((await get("never-ran", "")).status, 401);
    });
  });
});
