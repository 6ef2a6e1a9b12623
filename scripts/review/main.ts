/**
 * `npm run review [-- --quick] [--json] [--areas a,c] [--rounds N] [--cycles N]`: the
 * attack-and-fault review of issue 27, repeatable. Starts a real `space up` on a data
 * directory of its own, runs the areas (a malformed input, b isolation probes, c
 * cross-tenant, e create/kill cycles, d kill -9 faults: d last, it restarts the stack),
 * then kills every sandbox, stops the stack and counts what it left on the host against
 * the idle node's snapshot. Prints one table of counts (or `--json`); exits 1 when any
 * count that must be 0 is not, or an area found something. Needs root.
 */
import { parseArgs } from "node:util";
import { createdIds, killAll, newTenant } from "./clients.ts";
import { crossTenant } from "./cross-tenant.ts";
import { cycles } from "./cycles.ts";
import { faults } from "./faults.ts";
import { hostObjects, leaked, type Scope } from "./host-objects.ts";
import { isolation } from "./isolation.ts";
import { malformed } from "./malformed.ts";
import { isClean, renderTable, Tally, type AreaResult } from "./report.ts";
import { ReviewStack } from "./review-stack.ts";

const AREAS = { a: "malformed", b: "isolation", c: "tenants", d: "faults", e: "cycles" } as const;
type Area = (typeof AREAS)[keyof typeof AREAS];

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    json: { type: "boolean", default: false },
    areas: { type: "string" },
    rounds: { type: "string" },
    cycles: { type: "string" },
  },
});
const quick = values.quick ?? false;
const wanted = new Set<Area>(
  (values.areas ?? "a,b,c,d,e").split(",").map((s) => {
    const a = (AREAS as Record<string, Area>)[s.trim()] ?? (Object.values(AREAS).includes(s.trim() as Area) ? (s.trim() as Area) : undefined);
    if (!a) throw new Error(`--areas: ${JSON.stringify(s)} is none of ${Object.entries(AREAS).map(([k, v]) => `${k}|${v}`).join(", ")}`);
    return a;
  }),
);
const rounds = Number(values.rounds ?? (quick ? 1 : 4));
const nCycles = Number(values.cycles ?? (quick ? 10 : 100));
if (process.getuid?.() !== 0) {
  process.stderr.write("review: needs root (runc, network namespaces, btrfs)\n");
  process.exit(2);
}

const log = (s: string) => {
  if (!values.json) process.stderr.write(`review: ${s}\n`);
};
const startedAt = Date.now();
const results: AreaResult[] = [];
log("starting space up");
const stack = await ReviewStack.start();
const scope: Scope = {
  dataDir: stack.dataDir,
  stateDir: stack.stateDir,
  vethPrefix: stack.env.SPACE_NODE_VETH_PREFIX!,
  nftTable: stack.env.SPACE_NODE_NFT_TABLE!,
  cgroupParent: stack.env.SPACE_NODE_CGROUP_PARENT!,
};
const baseline = hostObjects(scope, new Set());
const faultIds = new Set<string>();
try {
  const run = async (area: Area, fn: () => Promise<AreaResult>) => {
    if (!wanted.has(area)) return;
    log(`area ${area}`);
    const at = Date.now();
    try {
      results.push(await fn());
    } catch (e) {
      // An area that could not finish is a finding, not a reason to skip the rest.
      const t = new Tally();
      t.findings.push(`${area} stopped: ${(e as Error).stack?.slice(0, 600) ?? String(e)}`);
      results.push(t.result(area, area, at));
    }
    try {
      // The Admin fuzzing may have revoked the first tenant's key or disabled it: the rest runs as a new tenant.
      if (area === "malformed") stack.useApiKey((await newTenant(stack.ep, `review-${Date.now()}`)).apiKey);
      // Each area starts on an empty tenant.
      await killAll(stack.ep);
    } catch (e) {
      const state = stack.proc?.exited() ? `space up exited: ${stack.output().slice(-600)}` : "space up still running";
      results.at(-1)!.findings.push(`after ${area}: ${(e as Error).message} (${String((e as Error).cause ?? "")}); ${state}`);
    }
    // A stack that died on the way is the finding.
    for (const c of stack.crashes.splice(0)) {
      results.at(-1)!.counts.crashes = (results.at(-1)!.counts.crashes ?? 0) + 1;
      results.at(-1)!.findings.push(c);
    }
    if (stack.proc?.exited()) await stack.up();
  };
  await run("malformed", () => malformed(stack, { quick }));
  await run("isolation", () => isolation(stack));
  await run("tenants", () => crossTenant(stack));
  await run("cycles", () => cycles(stack, scope, baseline, nCycles));
  await run("faults", () => faults(stack, { rounds, ids: faultIds }));
} finally {
  // What the whole run left: kill-all, a normal stop, then the host against the idle node.
  const t = new Tally();
  t.measure("leaks", "crashes");
  const final = Date.now();
  try {
    await killAll(stack.ep).catch((e: Error) => t.findings.push(`final kill-all: ${e.message}`));
    const ids = new Set([...createdIds, ...faultIds]);
    const end = Date.now() + 10_000;
    let left = leaked(baseline, hostObjects(scope, ids));
    while (left.length && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 500));
      left = leaked(baseline, hostObjects(scope, ids));
    }
    await stack.stop();
    for (const c of stack.crashes) t.find("crashes", c);
    left = leaked(baseline, hostObjects(scope, ids));
    for (const l of left) t.find("leaks", `after kill-all + stop: ${l}`);
    const code = stack.proc?.child.exitCode;
    if (code !== 0 && code !== null) t.find("crashes", `space up exited ${code} on SIGTERM: ${stack.output().slice(-600)}`);
  } finally {
    await stack.dispose();
  }
  results.push(t.result("host", "host after kill-all + stop", final));
}

const clean = results.every(isClean);
if (values.json) process.stdout.write(`${JSON.stringify({ quick, clean, durationMs: Date.now() - startedAt, results }, null, 2)}\n`);
else process.stdout.write(`${renderTable(results)}\n${clean ? "review: clean" : "review: FINDINGS"} (${((Date.now() - startedAt) / 1000).toFixed(0)} s)\n`);
process.exit(clean ? 0 : 1);
