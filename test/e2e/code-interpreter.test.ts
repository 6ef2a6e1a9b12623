/**
 * E2B's code interpreter end to end: the unmodified `@e2b/code-interpreter` SDK (newest)
 * against the real stack, on the `code-interpreter-v1` template (its default) and the
 * server in it (src/node/templates/code-interpreter/server.py) reached through the gateway
 * on port 49999. The template's tarball is built by the machine's set-up
 * (scripts/setup/build-code-interpreter-template.ts); a node imports it on first use.
 * Needs root (runc, netns, btrfs).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, TimeoutError, type ConnectionOpts, type OutputMessage, type SandboxOpts } from "@e2b/code-interpreter";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("E2B code interpreter with @e2b/code-interpreter (newest)", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let sb: Sandbox;
  const created: Sandbox[] = [];
  const create = async (o: Partial<SandboxOpts> = {}) => {
    const s = await Sandbox.create({ ...opts, ...o });
    created.push(s);
    return s;
  };

  before(async () => {
    stack = await startStack();
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    sb = await create();
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    await stack?.stop();
  });

  test("Sandbox.create() boots code-interpreter-v1; runCode('x = 1') then runCode('x + 1') → '2' in the same context", async () => {
    assert.equal((await sb.getInfo()).templateId, "code-interpreter-v1");
    const first = await sb.runCode("x = 1");
    assert.equal(first.error, undefined);
    assert.equal(first.text, undefined);
    const second = await sb.runCode("x + 1");
    assert.equal(second.error, undefined);
    assert.equal(second.text, "2");
    assert.equal(second.results.length, 1);
    assert.equal(second.results[0]!.isMainResult, true);
    assert.ok(typeof second.executionCount === "number" && second.executionCount > (first.executionCount ?? 0), `execution counts ${first.executionCount} then ${second.executionCount}`);
  });

  test("stdout is streamed while the code runs: the second print waits for a file the test writes on seeing the first", async () => {
    const seen: string[] = [];
    const released: Promise<unknown>[] = [];
    // Buffered to the end, the first line would never reach the test and the run would never end.
    const e = await sb.runCode(
      'import os, sys, time\nprint("one", flush=True)\nwhile not os.path.exists("/tmp/go"):\n    time.sleep(0.05)\nprint("two")\nprint("oops", file=sys.stderr)',
      {
        onStdout: (m: OutputMessage) => {
          seen.push(m.line);
          if (m.line === "one\n") released.push(sb.files.write("/tmp/go", "go"));
        },
        timeoutMs: 120_000,
      },
    );
    await Promise.all(released);
    assert.deepEqual(seen, ["one\n", "two\n"]);
    assert.deepEqual(e.logs.stdout, ["one\n", "two\n"]);
    assert.deepEqual(e.logs.stderr, ["oops\n"]);
  });

  test("an exception is the SDK's ExecutionError with name, value and traceback", async () => {
    const errors: string[] = [];
    const e = await sb.runCode("def f():\n    raise ValueError('bad value')\nf()", { onError: (err) => void errors.push(err.name) });
    assert.ok(e.error);
    assert.equal(e.error.name, "ValueError");
    assert.equal(e.error.value, "bad value");
    assert.match(e.error.traceback, /ValueError/);
    assert.deepEqual(errors, ["ValueError"]);
  });

  test("a matplotlib plot returns a PNG; IPython.display.HTML an HTML result", async () => {
    const plot = await sb.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()");
    assert.equal(plot.error, undefined);
    const png = plot.results.find((r) => r.png);
    assert.ok(png, `no PNG among ${JSON.stringify(plot.results.map((r) => r.formats()))}`);
    assert.equal(Buffer.from(png.png!, "base64").subarray(1, 4).toString(), "PNG");
    const html = await sb.runCode("from IPython.display import HTML\nHTML('<b>bold</b>')");
    assert.equal(html.results[0]?.html, "<b>bold</b>");
    assert.ok(html.results[0]!.formats().includes("html"));
  });

  test("env vars per run: set for that run only", async () => {
    const withEnv = await sb.runCode("import os\nos.environ.get('SPACE_CI_VAR')", { envs: { SPACE_CI_VAR: "per-run" } });
    assert.equal(withEnv.text, "'per-run'");
    const without = await sb.runCode("import os\nos.environ.get('SPACE_CI_VAR')");
    assert.equal(without.text, undefined);
    assert.equal(without.error, undefined);
  });

  test("contexts: create with cwd, list, restart (state gone), remove; a context's state is its own", async () => {
    const ctx = await sb.createCodeContext({ cwd: "/tmp", language: "python" });
    assert.equal(ctx.cwd, "/tmp");
    assert.equal(ctx.language, "python");
    assert.equal((await sb.runCode("import os\nos.getcwd()", { context: ctx })).text, "'/tmp'");
    await sb.runCode("y = 41", { context: ctx });
    assert.equal((await sb.runCode("y + 1", { context: ctx })).text, "42");
    // The default context does not see it.
    assert.equal((await sb.runCode("y")).error?.name, "NameError");
    assert.ok((await sb.listCodeContexts()).some((c) => c.id === ctx.id));
    await sb.restartCodeContext(ctx);
    assert.equal((await sb.runCode("y", { context: ctx })).error?.name, "NameError");
    await sb.removeCodeContext(ctx.id);
    assert.ok(!(await sb.listCodeContexts()).some((c) => c.id === ctx.id));
    await assert.rejects(sb.runCode("1", { context: ctx }), (e: unknown) => e instanceof Error && /not found/i.test(e.message));
  });

  test("a language the template lacks is refused; a timeout interrupts a long run and frees the context", async () => {
    await assert.rejects(sb.runCode("1", { language: "r" }), (e: unknown) => e instanceof Error && /400/.test(e.message));
    await assert.rejects(
      sb.runCode("import time\nfor i in range(6000):\n    n = i\n    time.sleep(0.1)", { timeoutMs: 3000 }),
      (e: unknown) => e instanceof TimeoutError,
    );
    // Interrupted, not left running: the next run answers (it would wait ten minutes behind it otherwise) and the loop stopped early.
    const after = await sb.runCode("n");
    assert.equal(after.error, undefined);
    assert.ok(Number(after.text) < 5999, `the loop ran on to ${after.text}`);
  });

  test("the kernel's state survives pause → connect", async () => {
    const s = await create();
    await s.runCode("kept = 'across pause'");
    assert.equal(await s.pause(), true);
    const back = await Sandbox.connect(s.sandboxId, opts);
    assert.equal((await back.runCode("kept")).text, "'across pause'");
  });
});
