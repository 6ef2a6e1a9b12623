/**
 * Template benchmark.
 * 1. On a real stack (`space up`, e2b SDK): build time of a recipe cold (a new ENV value:
 *    every layer after the image is new) and with a warm layer cache (same recipe again, and
 *    with only the last step changed), and sandbox create time from the built template.
 * 2. On one node agent (real runc + CRIU + btrfs, fs blob store): publish and pull time of
 *    the `base` rootfs (a node lacking it: download, sha256 check, btrfs receive), and
 *    sandbox create time from a template captured after ready vs the same template booted
 *    cold (its start command, a Node.js HTTP server, started and polled ready every time).
 *
 *   npm run bench -- templates [runs=3] [--node-only]
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template } from "e2b";
import { BuildRecipe } from "../src/contract/build-recipe.ts";
import { spec, startTestNode } from "../test/node/helpers.ts";
import { startStack } from "../test/support/stack.ts";
import { makeOciArchive } from "../test/templates/fixtures.ts";
import { median, percentile } from "./support/stats.ts";

const runs = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 3);
const nodeOnly = process.argv.includes("--node-only");

if (!nodeOnly) await stackBench();
await nodeBench();

async function stackBench(): Promise<void> {
  // Its own host scope (startStack's hostScopeFor): bench runs beside tests and other benches.
  const stack = await startStack({ env: { SPACE_NODE_BTRFS_IMAGE_GIB: "16" } });
  const oci = await makeOciArchive();
  const ctx = await mkdtemp(join(tmpdir(), "space-bench-ctx-"));
  await writeFile(join(ctx, "hello.txt"), "hello\n");
  const opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
  const recipe = (n: number, last = "true") =>
    Template({ fileContextPath: ctx })
      .fromImage(`oci-archive:${oci.archive}`)
      .setEnvs({ N: String(n) })
      .runCmd("for i in $(seq 1 2000); do echo $i > /tmp/f$i; done; sleep 1")
      .copy("hello.txt", "/srv/")
      .runCmd(last);
    try {
    const cold: number[] = [];
    const warm: number[] = [];
    const lastChanged: number[] = [];
    const baseCold: number[] = [];
    for (let i = 0; i < runs; i++) {
      cold.push(await time(() => Template.build(recipe(i), `bench-${i}`, opts))); // new ENV value: every layer after the image is new
      warm.push(await time(() => Template.build(recipe(i), `bench-${i}`, opts)));
      lastChanged.push(await time(() => Template.build(recipe(i, `echo ${i}`), `bench-${i}`, opts)));
      baseCold.push(await time(() => Template.build(Template().fromTemplate("base").setEnvs({ N: String(i) }).runCmd("echo x > /etc/x"), `bench-base-${i}`, opts)));
    }
    const creates: number[] = [];
    for (let i = 0; i < runs * 3; i++) {
      let sb: Sandbox | undefined;
      creates.push(await time(async () => (sb = await Sandbox.create("bench-0", opts))));
      await sb?.kill();
    }
    const report = {
      runs,
      buildColdMs: median(cold),
      buildWarmCacheMs: median(warm),
      buildLastStepChangedMs: median(lastChanged),
      buildFromBaseTemplateMs: median(baseCold),
      sandboxCreateFromBuiltTemplateMs: median(creates),
      samples: { cold, warm, lastChanged, baseCold, creates },
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } finally {
    await stack.stop();
    await oci.cleanup();
    await rm(ctx, { recursive: true, force: true });
  }
}

async function nodeBench(): Promise<void> {
  const blobDir = await mkdtemp(join(tmpdir(), "space-bench-tplnode-"));
  const node = await startTestNode({
    realEnvd: true,
    env: { SPACE_BLOB_URL: blobDir },
  });
  const sig = () => AbortSignal.timeout(600_000);
  const tc = node.agent.templates!;
  try {
    // Pull: `base`'s rootfs published once, then pulled by a node that lacks it.
    await tc.point("base-copy", "base", sig(), { publish: false });
    const publish = await time(() => tc.publish("base-copy", sig()));
    const manifestBytes = (await node.agent.disks!.templateInfo("base-copy"))!.rootfsSizeMib;
    const pulls: number[] = [];
    for (let i = 0; i < runs; i++) {
      await tc.remove("base-copy", sig(), { catalog: false });
      pulls.push(await time(() => tc.ensure("base-copy", sig())));
    }
    // Captured after ready vs cold: the same recipe, a start command that serves HTTP.
    const server = `/opt/space/bin/node -e "require('http').createServer((q, s) => s.end('ok')).listen(8080)"`;
    const ready = `/opt/space/bin/node -e "require('http').get('http://127.0.0.1:8080', (r) => process.exit(r.statusCode === 200 ? 0 : 1)).on('error', () => process.exit(1))"`;
    const build = async (name: string, capture: boolean) => {
      node.agent.builder!.start(name, name, BuildRecipe.parse({ from: { kind: "template", name: "base" }, steps: [{ type: "RUN", cmd: "echo app > /etc/app" }], startCmd: server, readyCmd: ready, capture }));
      const st = await node.agent.builder!.wait(name);
      if (st.status !== "ready") throw new Error(`build ${name} failed: ${st.error?.message}`);
      return st.result!.durationMs;
    };
    const buildCold = await build("bench-cold", false);
    const buildCaptured = await build("bench-captured", true);
    const create = async (template: string) => {
      const s = spec({ template, diskMib: 1024 });
      const t = performance.now();
      const res = await node.agent.app.inject({ method: "POST", url: "/v1/sandboxes", headers: { authorization: "Bearer test-token" }, payload: s });
      const ms = Math.round(performance.now() - t);
      if (res.statusCode !== 201) throw new Error(`create from ${template}: ${res.statusCode} ${res.body}`);
      await node.agent.manager!.kill(s.sandboxId, sig());
      return ms;
    };
    const cold: number[] = [];
    const captured: number[] = [];
    for (let i = 0; i < runs * 3; i++) {
      cold.push(await create("bench-cold"));
      captured.push(await create("bench-captured"));
    }
    const report = {
      runs,
      baseRootfsMib: manifestBytes,
      basePublishMs: publish,
      basePullMs: { median: median(pulls), p99: percentile(pulls, 99), samples: pulls },
      buildWithStartCmdMs: buildCold,
      buildWithCaptureAfterReadyMs: buildCaptured,
      createColdWithStartCmdMs: { median: median(cold), p99: percentile(cold, 99), samples: cold },
      createFromCaptureMs: { median: median(captured), p99: percentile(captured, 99), samples: captured },
      coldOverCaptured: Math.round((median(cold) / median(captured)) * 100) / 100,
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } finally {
    await node.close();
    await rm(blobDir, { recursive: true, force: true });
  }
}

async function time(f: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await f();
  return Math.round(performance.now() - t);
}
