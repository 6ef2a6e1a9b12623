/**
 * Time to first command (TTFC): SDK `Sandbox.create()` → first `commands.run('echo hi')`
 * completes. Median and p99 over N sequential creates and M concurrent ones.
 *
 *   node --import tsx bench/ttfc.ts [--sequential 50] [--concurrent 20] [--json]
 *
 * Targets E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY when set; otherwise starts the
 * real stack (`space up` in a temp data dir) and stops it afterwards. Sandboxes are
 * killed after each sample (not timed).
 */
import { parseArgs } from "node:util";
import { Sandbox } from "e2b";
import { startStack, type Stack } from "../test/support/stack.ts";

interface Sample {
  createMs: number;
  ttfcMs: number;
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

function summarize(name: string, samples: Sample[], wallMs: number) {
  const ttfc = samples.map((s) => s.ttfcMs).sort((a, b) => a - b);
  const create = samples.map((s) => s.createMs).sort((a, b) => a - b);
  return {
    name,
    n: samples.length,
    ttfcMedianMs: Math.round(percentile(ttfc, 50)),
    ttfcP99Ms: Math.round(percentile(ttfc, 99)),
    ttfcMaxMs: Math.round(ttfc[ttfc.length - 1] ?? NaN),
    createMedianMs: Math.round(percentile(create, 50)),
    wallMs: Math.round(wallMs),
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      sequential: { type: "string", default: "50" },
      concurrent: { type: "string", default: "20" },
      json: { type: "boolean", default: false },
    },
  });
  let stack: Stack | null = null;
  let apiUrl = process.env.E2B_API_URL;
  let sandboxUrl = process.env.E2B_SANDBOX_URL;
  let apiKey = process.env.E2B_API_KEY;
  if (!apiUrl || !sandboxUrl || !apiKey) {
    stack = await startStack();
    ({ apiUrl, sandboxUrl, apiKey } = stack);
  }
  const opts = { apiUrl, sandboxUrl, apiKey, requestTimeoutMs: 300_000 };

  const one = async (): Promise<Sample> => {
    const t0 = performance.now();
    const sb = await Sandbox.create(opts);
    const t1 = performance.now();
    try {
      const r = await sb.commands.run("echo hi");
      if (r.stdout !== "hi\n") throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`);
      return { createMs: t1 - t0, ttfcMs: performance.now() - t0 };
    } finally {
      await sb.kill().catch(() => {});
    }
  };

  try {
    await one(); // warm-up (template cache, JIT), not counted
    const results = [];
    const nSeq = Number(values.sequential);
    if (nSeq > 0) {
      const seq: Sample[] = [];
      let failed = 0;
      const w0 = performance.now();
      for (let i = 0; i < nSeq; i++) {
        try {
          seq.push(await one());
        } catch (e) {
          failed++;
          process.stderr.write(`sequential sample ${i} failed: ${String(e).slice(0, 300)}\n`);
        }
      }
      results.push({ ...summarize(`sequential x${nSeq}`, seq, performance.now() - w0), failed });
    }
    const nConc = Number(values.concurrent);
    if (nConc > 0) {
      const w0 = performance.now();
      const settled = await Promise.allSettled(Array.from({ length: nConc }, () => one()));
      const conc = settled.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
      for (const r of settled) if (r.status === "rejected") process.stderr.write(`concurrent sample failed: ${String(r.reason).slice(0, 300)}\n`);
      results.push({ ...summarize(`concurrent x${nConc}`, conc, performance.now() - w0), failed: nConc - conc.length });
    }
    if (values.json) process.stdout.write(JSON.stringify({ bench: "ttfc", warmPool: false, results }, null, 2) + "\n");
    else {
      process.stdout.write("TTFC: Sandbox.create → first commands.run('echo hi') (cold, no warm pool)\n");
      for (const r of results) {
        process.stdout.write(
          `  ${r.name.padEnd(16)} median ${r.ttfcMedianMs} ms  p99 ${r.ttfcP99Ms} ms  max ${r.ttfcMaxMs} ms  (create median ${r.createMedianMs} ms, wall ${r.wallMs} ms, failed ${r.failed})\n`,
        );
      }
    }
  } finally {
    await stack?.stop();
  }
}

await main();
