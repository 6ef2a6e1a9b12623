/**
 * Template build benchmark on a real stack (`space up`): build time of a recipe cold
 * (layer cache pruned: a fresh stack) and with a warm layer cache (same recipe again, and
 * with only the last step changed), and sandbox create time from the built template.
 *
 *   node --experimental-strip-types bench/templates.ts [runs=3]
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template } from "e2b";
import { startStack } from "../test/support/stack.ts";
import { makeOciArchive } from "../test/templates/fixtures.ts";

const runs = Number(process.argv[2] ?? 3);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const stack = await startStack({
  env: {
    SPACE_NODE_BRIDGE: "spcbtpl0", SPACE_NODE_NFT_TABLE: "space_bench_tpl", SPACE_NODE_VETH_PREFIX: "vb",
    SPACE_NODE_CGROUP_PARENT: "space-bench-tpl", SPACE_NODE_SLOT_CIDR: "10.205.0.0/20", SPACE_NODE_BTRFS_IMAGE_GIB: "16",
    SPACE_NODE_DISK_RESERVE_MIB: "1024", SPACE_NODE_RUNTIME_STATE_DIR: `/run/space-bench-tpl-${process.pid}`,
  },
});
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
const time = async (f: () => Promise<unknown>) => {
  const t = performance.now();
  await f();
  return Math.round(performance.now() - t);
};
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
