// Background sandboxes (warm members): booted at low CPU weight and niceness, restored by init.
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { isRoot, spec, startTestNode, type TestNode } from "./helpers.ts";

const skip = isRoot ? false : "needs root (runc, btrfs, netns)";
const auth = { authorization: "Bearer test-token" };

/** nice value of every thread of `pid` (field 19 of /proc/<pid>/task/<tid>/stat). */
async function niceOf(pid: number): Promise<number[]> {
  const tids = await readdir(`/proc/${pid}/task`);
  return Promise.all(tids.map(async (t) => Number((await readFile(`/proc/${pid}/task/${t}/stat`, "utf8")).split(") ")[1]!.split(" ")[16])));
}

// Both OCI runtimes: they place a relative cgroupsPath differently (runc under its caller's cgroup, crun under each hierarchy's root).
for (const runtime of ["runc", "crun"] as const) describe(`background sandboxes (${runtime})`, { skip, timeout: 180_000 }, () => {
  let node: TestNode;
  before(async () => {
    node = await startTestNode({ env: { SPACE_RUNTIME: runtime } });
  });
  let closed = false;
  after(async () => (closed ? undefined : node?.close()));

  const call = (method: string, url: string, payload?: unknown) =>
    node.agent.app.inject({ method: method as "GET", url, headers: auth, ...(payload === undefined ? {} : { payload: payload as object }) });
  const shares = async (id: string) => Number(await readFile(join(node.agent.runtime!.cgroupDirs(id).cpu!, "cpu.shares"), "utf8"));
  const initPid = async (id: string) => (await node.agent.runtime!.state(id, AbortSignal.timeout(10_000)))!.pid;

  it("a background sandbox runs at low CPU weight and niceness until init, then at the defaults", async () => {
    const bg = spec({ background: true });
    const fg = spec();
    assert.equal((await call("POST", "/v1/sandboxes", bg)).statusCode, 201);
    assert.equal((await call("POST", "/v1/sandboxes", fg)).statusCode, 201);
    assert.equal(await shares(fg.sandboxId), 1024);
    const memory = node.agent.runtime!.cgroupDirs(fg.sandboxId).memory!;
    assert.equal(Number(await readFile(join(memory, "memory.limit_in_bytes"), "utf8")), fg.memoryMib * 1048576, `the sandbox's own memory cgroup, ${memory}`);
    assert.deepEqual([...new Set(await niceOf(await initPid(fg.sandboxId)))], [0]);
    assert.equal(await shares(bg.sandboxId), 128);
    assert.ok((await niceOf(await initPid(bg.sandboxId))).every((n) => n === 10), "envd of a background sandbox is niced");

    const r = await call("POST", `/v1/sandboxes/${bg.sandboxId}/init`, {});
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(await shares(bg.sandboxId), 1024);
    assert.deepEqual([...new Set(await niceOf(await initPid(bg.sandboxId)))], [0]);
  });

  it("a released node leaves no cgroup of its own behind", async () => {
    const parents = Object.values(node.agent.runtime!.cgroupDirs("x")).map((d) => dirname(d));
    assert.ok(parents.some((p) => existsSync(p)), `the node's cgroup parent exists while it runs: ${parents[0]}`);
    closed = true;
    await node.close();
    assert.deepEqual(parents.filter((p) => existsSync(p)), []);
  });
});
