/**
 * Dashboard page loads on `space up` with N live sandboxes (issue 23: under a second with
 * 200 listed). Starts a stack (test/support/stack.ts), creates N small sandboxes with the
 * e2b SDK, then in chromium (test/support/browser.ts) times, per round, a cold load of
 * each page until its content is on screen: the sandboxes list with all N rows (the first
 * event of the live stream), one sandbox's detail with its charts, the operator's nodes.
 * Run: npm run bench -- dashboard [--count N] [--rounds R] [--settle S]   (N defaults to 200, R to 5)
 * `--settle S` waits S seconds after the burst before timing (default 0: right after it, while
 * the new sandboxes still settle); the host's load average is printed either way.
 *
 * Placement counts 1 vCPU, 128 MiB and the default 2 GiB disk per sandbox against the host
 * times the overcommit (disk: the node's cache image ×4, so each node's sparse image is made
 * 256 GiB; only what sandboxes write takes room). At the maximum vCPU overcommit (64), one
 * node on an H-CPU host holds 64·H sandboxes. When
 * N does not fit, a second node on the same host joins (test/support/two-nodes.ts), so a
 * 2-CPU machine still lists 200 real sandboxes; the output says how many nodes there were.
 */
import { cpus, loadavg } from "node:os";
import { performance } from "node:perf_hooks";
import { Sandbox } from "e2b";
import type { Page } from "playwright-core";
import { startStack, type Stack } from "../test/support/stack.ts";
import { startTwoNodes } from "../test/support/two-nodes.ts";
import { launchBrowser } from "../test/support/browser.ts";
import { median } from "./support/stats.ts";

const argOf = (name: string, d: number) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : d;
};
const COUNT = argOf("--count", 200);
const ROUNDS = argOf("--rounds", 5);
const SETTLE_S = argOf("--settle", 0);

const VCPU_OVERCOMMIT = 64;
const nodeEnv = { SPACE_NODE_MAX_SLOTS: String(COUNT + 20), SPACE_NODE_BTRFS_IMAGE_GIB: "256" };
const env = { ...nodeEnv, SPACE_PLACEMENT_VCPU_OVERCOMMIT: String(VCPU_OVERCOMMIT), SPACE_PLACEMENT_MEMORY_OVERCOMMIT: "8" };
// A margin of 10 sandboxes per node: the batch in flight when the first node fills.
const twoNodes = COUNT + 10 > cpus().length * VCPU_OVERCOMMIT;
const two = twoNodes ? await startTwoNodes("bench-dashboard", { env, nodeBEnv: nodeEnv }) : null;
const stack: Stack = two?.stack ?? (await startStack({ env }));
process.stdout.write(`${twoNodes ? 2 : 1} node(s) on a ${cpus().length}-CPU host\n`);
const opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 300_000 };
const made: Sandbox[] = [];
const browser = await launchBrowser();
try {
  const t0 = performance.now();
  for (let i = 0; i < COUNT; i += 10) {
    const batch = Array.from({ length: Math.min(10, COUNT - i) }, (_, j) =>
      Sandbox.create({ ...opts, timeoutMs: 3_600_000, metadata: { bench: "dashboard", n: String(i + j), "space.resources": JSON.stringify({ memory_mib: 128, vcpu: 1 }) } }),
    );
    // Every create that succeeded is killed at the end, even when one of its batch failed.
    const settled = await Promise.allSettled(batch);
    for (const r of settled) if (r.status === "fulfilled") made.push(r.value);
    const failed = settled.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
  }
  process.stdout.write(`created ${made.length} sandboxes in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
  // What else the host runs while the pages load (the sandboxes' own settling after a burst shows here).
  const load = () => loadavg().map((x) => x.toFixed(1)).join(" ");
  if (SETTLE_S > 0) await new Promise((r) => setTimeout(r, SETTLE_S * 1000));
  process.stdout.write(`host load average before the loads: ${load()}\n`);

  const session = (role: string, secret: string) => JSON.stringify({ role, secret, sandboxUrl: stack.sandboxUrl });
  const timed = async (role: string, secret: string, hash: string, ready: (p: Page) => Promise<unknown>) => {
    const ctx = await browser.newContext({ viewport: { width: 1366, height: 768 } });
    // Signed in already (the credential in sessionStorage, as the sign-in form leaves it): the load alone is timed.
    await ctx.addInitScript(`sessionStorage.setItem("space.dashboard.session", ${JSON.stringify(session(role, secret))})`);
    const page = await ctx.newPage();
    const start = performance.now();
    await page.goto(`${stack.apiUrl}/dashboard/${hash}`);
    await ready(page);
    const ms = performance.now() - start;
    await ctx.close();
    return ms;
  };
  const pages: Record<string, () => Promise<number>> = {
    [`sandboxes (${COUNT} rows)`]: () =>
      timed("tenant", stack.apiKey, "#/sandboxes", (p) => p.waitForFunction(`document.querySelectorAll("tr[data-sandbox]").length >= ${COUNT}`, undefined, { timeout: 30_000 })),
    "sandbox detail": () => timed("tenant", stack.apiKey, `#/sandboxes/${made[0]!.sandboxId}`, (p) => p.getByRole("region", { name: "Usage" }).waitFor({ timeout: 30_000 })),
    "operator nodes": () => timed("operator", stack.adminToken, "#/nodes", (p) => p.locator("tr[data-node]").first().waitFor({ timeout: 30_000 })),
  };
  // One warm-up load (the first request of a checkout may build the dashboard).
  await pages[`sandboxes (${COUNT} rows)`]!();
  for (const [name, run] of Object.entries(pages)) {
    const ms: number[] = [];
    for (let r = 0; r < ROUNDS; r++) ms.push(await run());
    process.stdout.write(`${name.padEnd(22)} median ${median(ms).toFixed(0)} ms  max ${Math.max(...ms).toFixed(0)} ms  (${ROUNDS} cold loads; load average ${load()})\n`);
  }
} finally {
  await browser.close();
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
  await (two ? two.stop() : stack.stop());
}
