/**
 * The compiled build (`npm run build` → dist/space): one-shot commands and the whole
 * stack (`space up`) run from it with a hook that refuses tsx and every `.ts` file
 * (test/support/no-typescript.mjs), and the unmodified e2b SDK drives a sandbox through
 * it. `SPACE_E2E_COMPILED=1 npm test -- <file>` runs any other end-to-end suite the same way.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, type ConnectionOpts } from "e2b";
import { findCodeInterpreterTarball } from "../../src/node/templates/code-interpreter-template.ts";
import { startStack, type Stack } from "../support/stack.ts";
import { baseEnv, spaceArgv } from "../support/space-process.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

const compiledSpace = (args: string[], env: Record<string, string> = {}) => {
  const [node, ...argv] = spaceArgv(true);
  return spawnSync(node!, [...argv, ...args], { env: { ...baseEnv(), ...env }, encoding: "utf8", timeout: 120_000 });
};

describe("the compiled build", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };

  before(async () => {
    const b = spawnSync("npm", ["run", "--silent", "build"], { encoding: "utf8", timeout: 120_000 });
    assert.equal(b.status, 0, `npm run build: ${b.stdout}\n${b.stderr}`);
    stack = await startStack({ compiled: true });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await stack?.stop();
  });

  test("npm run build emits dist/space apart from dist/envd, with the assets the code reads beside itself", () => {
    for (const f of ["space.mjs", "main.mjs", "spawn-server.mjs", "migrations/001-initial.sql", "inputs.json", "code-interpreter/server.py", "code-interpreter/requirements.txt"])
      assert.ok(existsSync(join("dist/space", f)), `dist/space/${f}`);
    // build:envd ran for this lane: its addon travels with the compiled node agent.
    assert.ok(existsSync("dist/envd/envd.mjs") && existsSync("dist/space/original-dst.node"));
    const inputs = JSON.parse(readFileSync("dist/space/inputs.json", "utf8")) as string[];
    assert.ok(inputs.includes("src/cli/main.ts") && inputs.every((f) => f.startsWith("src/")), inputs.join(", "));
  });

  test("space version, config and migrate run compiled, without a TypeScript loader", () => {
    const v = compiledSpace(["version"]);
    assert.equal(v.status, 0, v.stderr);
    assert.match(v.stdout, /^space \d+\.\d+\.\d+/);
    const c = compiledSpace(["config"]);
    assert.equal(c.status, 0, c.stderr);
    assert.match(c.stdout, /SPACE_SUBSTRATE=direct/);
    const dir = mkdtempSync(join(tmpdir(), "space-compiled-"));
    try {
      const m = compiledSpace(["migrate"], { SPACE_DATA_DIR: dir, SPACE_LOG_LEVEL: "warn" });
      assert.equal(m.status, 0, m.stderr);
      assert.match(m.stdout, /^schema version \d+ \(applied 1, 2,/);
      const again = compiledSpace(["migrate"], { SPACE_DATA_DIR: dir, SPACE_LOG_LEVEL: "warn" });
      assert.match(again.stdout, /\(up to date\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("space up from the build: the e2b SDK creates a sandbox, runs a command, writes and reads a file", async () => {
    assert.doesNotMatch(stack.output(), /the compiled CLI loaded/);
    const sb = await Sandbox.create({ ...opts, metadata: { suite: "compiled" } });
    try {
      const r = await sb.commands.run("echo compiled; id -un");
      assert.equal(r.stdout, "compiled\nuser\n");
      await sb.files.write("/home/user/c.txt", "from the build");
      assert.equal(await sb.files.read("/home/user/c.txt"), "from the build");
    } finally {
      await sb.kill();
    }
    assert.equal(await sb.isRunning(), false);
  });

  // A compiled node reads the code-interpreter recipe beside itself: without it, it offered no
  // code-interpreter-v1 and every later stack of the run (bin/space.mjs prefers a current build) answered 404.
  test("space up from the build offers code-interpreter-v1 when the machine built its tarball", async (t) => {
    if (!(await findCodeInterpreterTarball(join(".tools", "templates")))) return t.skip("no code-interpreter-v1 tarball in .tools/templates");
    const sb = await Sandbox.create("code-interpreter-v1", { ...opts, metadata: { suite: "compiled" } });
    try {
      assert.equal((await sb.getInfo()).templateId, "code-interpreter-v1");
    } finally {
      await sb.kill();
    }
  });
});
