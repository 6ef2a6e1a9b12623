/**
 * The code interpreter's time to first result, beside plain TTFC, in one run on one stack:
 * `@e2b/code-interpreter` `Sandbox.create()` (template `code-interpreter-v1`) → `runCode("1+1")`
 * → result "2", cold (no pool) and from a warm pool of the template; and, for comparison, the
 * e2b SDK's `Sandbox.create()` (`base`) → `commands.run("echo hi")` cold. Median and p99 over
 * N sequential samples per phase; sandboxes are killed after each sample (not timed).
 *
 *   npm run bench -- code-interpreter [--n 10] [--size 3] [--json]
 *
 * Targets E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY / SPACE_ADMIN_TOKEN when set;
 * otherwise starts the real stack (`space up` in a temp data dir). The template's tarball
 * comes from the machine's set-up (scripts/setup/build-code-interpreter-template.ts); the
 * first create on a node imports it (the warm-up sample, not counted).
 */
import { parseArgs } from "node:util";
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";
import { Sandbox } from "e2b";
import { startStack, waitFor, type Stack } from "../test/support/stack.ts";
import { percentile } from "./support/stats.ts";

const TEMPLATE = "code-interpreter-v1";


interface Sample {
  createMs: number;
  firstMs: number;
  adopted?: boolean;
}

function summarize(name: string, samples: Sample[], failed: number) {
  const first = samples.map((s) => s.firstMs);
  const create = samples.map((s) => s.createMs);
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return {
    name,
    n: samples.length,
    medianMs: r1(percentile(first, 50)),
    p99Ms: r1(percentile(first, 99)),
    createMedianMs: r1(percentile(create, 50)),
    failed,
    ...(samples.some((s) => s.adopted !== undefined) ? { adopted: samples.filter((s) => s.adopted).length } : {}),
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      n: { type: "string", default: "10" },
      size: { type: "string", default: "3" },
      json: { type: "boolean", default: false },
    },
  });
  const n = Number(values.n);
  const size = Number(values.size);
  let stack: Stack | null = null;
  let apiUrl = process.env.E2B_API_URL;
  let sandboxUrl = process.env.E2B_SANDBOX_URL;
  let apiKey = process.env.E2B_API_KEY;
  let adminToken = process.env.SPACE_ADMIN_TOKEN;
  if (!apiUrl || !sandboxUrl || !apiKey || !adminToken) {
    stack = await startStack({ env: { SPACE_DEFAULT_VCPU: process.env.BENCH_VCPU ?? "1" } });
    ({ apiUrl, sandboxUrl, apiKey, adminToken } = stack);
  }
  const opts = { apiUrl, sandboxUrl, apiKey, requestTimeoutMs: 300_000 };
  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${apiUrl}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, ...(body ? { "content-type": "application/json" } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    if (!res.ok && res.status !== 404) throw new Error(`admin ${method} ${path}: ${res.status} ${await res.text()}`);
    return res.status === 204 || res.status === 404 ? null : ((await res.json()) as { members?: Array<{ state: string }> });
  };
  const ready = async () => ((await admin("GET", `/warm-pools/${TEMPLATE}`))?.members ?? []).filter((m) => m.state === "ready").length;
  const adoptions = async () =>
    (await (await fetch(`${apiUrl}/metrics`)).text())
      .split("\n")
      .filter((l) => l.startsWith("space_warm_pool_adoptions_total{"))
      .reduce((a, l) => a + Number(l.split(" ").pop()), 0);

  const interpreter = async (): Promise<Sample> => {
    const t0 = performance.now();
    const sb = await CodeSandbox.create(opts);
    const t1 = performance.now();
    try {
      const e = await sb.runCode("1+1");
      if (e.text !== "2") throw new Error(`unexpected result ${JSON.stringify(e.toJSON())}`);
      return { createMs: t1 - t0, firstMs: performance.now() - t0 };
    } finally {
      await sb.kill().catch(() => {});
    }
  };
  const plain = async (): Promise<Sample> => {
    const t0 = performance.now();
    const sb = await Sandbox.create(opts);
    const t1 = performance.now();
    try {
      const r = await sb.commands.run("echo hi");
      if (r.stdout !== "hi\n") throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`);
      return { createMs: t1 - t0, firstMs: performance.now() - t0 };
    } finally {
      await sb.kill().catch(() => {});
    }
  };
  const sequential = async (name: string, one: () => Promise<Sample>, track = false, before: () => Promise<unknown> = async () => {}) => {
    const out: Sample[] = [];
    let failed = 0;
    for (let i = 0; i < n; i++) {
      try {
        await before();
        const a = track ? await adoptions() : 0;
        const s = await one();
        if (track) s.adopted = (await adoptions()) > a;
        out.push(s);
      } catch (e) {
        failed++;
        process.stderr.write(`${name} sample ${i} failed: ${String(e).slice(0, 300)}\n`);
      }
    }
    return summarize(name, out, failed);
  };

  const results: Array<ReturnType<typeof summarize>> = [];
  try {
    await admin("DELETE", `/warm-pools/${TEMPLATE}`);
    await plain(); // warm-up (JIT), not counted
    await interpreter(); // imports the template into the node cache, not counted
    results.push(await sequential(`plain TTFC cold (base, echo hi) x${n}`, plain));
    results.push(await sequential(`code interpreter cold x${n}`, interpreter));
    await admin("PUT", `/warm-pools/${TEMPLATE}`, { size });
    const full = () => waitFor(async () => (await ready()) >= size, `warm pool of ${size} ${TEMPLATE} full`, 15 * 60_000, 500);
    await full();
    // Each sample adopts from a full pool (a refill is not what is measured).
    results.push(await sequential(`code interpreter warm x${n}`, interpreter, true, full));
    await admin("DELETE", `/warm-pools/${TEMPLATE}`);
  } finally {
    await stack?.stop();
  }
  const store = stack ? "pglite" : "external stack";
  if (values.json) process.stdout.write(JSON.stringify({ bench: "code-interpreter", store, results }, null, 2) + "\n");
  else {
    process.stdout.write(`Code interpreter: create → runCode("1+1") → "2", cold vs warm pool, beside plain TTFC (same stack, store: ${store})\n`);
    for (const r of results) {
      const adopted = r.adopted !== undefined ? `, adopted ${r.adopted}/${r.n}` : "";
      process.stdout.write(`  ${r.name.padEnd(38)} median ${r.medianMs} ms  p99 ${r.p99Ms} ms  (create median ${r.createMedianMs} ms, failed ${r.failed}${adopted})\n`);
    }
  }
}

await main();
