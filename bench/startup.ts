/**
 * Startup time and memory of `space api`, compiled (`npm run build` → dist/space) against
 * the TypeScript loader (tsx on src/), side by side: each round starts one process per
 * build on a fresh PGlite data directory, times spawn → first 200 from /health, and reads
 * its RSS (VmRSS) once it is ready and again after 2 s of idling; rounds alternate builds.
 * Run: npm run bench -- startup [--rounds N]   (builds dist/space first; N defaults to 5)
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { freePort } from "../test/support/stack.ts";
import { baseEnv } from "../test/support/space-process.ts";

const arg = process.argv.indexOf("--rounds");
const ROUNDS = arg > 0 ? Number(process.argv[arg + 1]) : 5;

const builds = {
  compiled: [resolve("dist/space/space.mjs")],
  loader: ["--import", "tsx", "--input-type=module", "-e", `import { main } from "${resolve("src/cli/main.ts")}"; await main([process.argv[0], "space", ...process.argv.slice(1)]);`],
} as const;
type Build = keyof typeof builds;

const rssMib = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;

async function once(build: Build): Promise<{ readyMs: number; rssReady: number; rssIdle: number }> {
  const dir = mkdtempSync(join(tmpdir(), "space-bench-startup-"));
  const [port, gateway] = [await freePort(), await freePort()];
  const env = {
    ...baseEnv(),
    SPACE_DATA_DIR: dir,
    SPACE_API_PORT: String(port),
    SPACE_GATEWAY_PORT: String(gateway),
    SPACE_ADMIN_TOKEN: "bench-admin-token-0123456789",
    SPACE_INTERNAL_TOKEN: "bench-internal-token-0123456789",
    SPACE_LOG_LEVEL: "warn",
  };
  const t0 = performance.now();
  const child = spawn(process.execPath, [...builds[build], "api"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr.on("data", (b: Buffer) => (err += b.toString()));
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${build}: space api exited ${child.exitCode}: ${err.slice(-2000)}`);
      const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
      if (ok) break;
      if (performance.now() - t0 > 60_000) throw new Error(`${build}: not healthy after 60 s: ${err.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const readyMs = performance.now() - t0;
    const rssReady = rssMib(child.pid!);
    await new Promise((r) => setTimeout(r, 2000));
    return { readyMs, rssReady, rssIdle: rssMib(child.pid!) };
  } finally {
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await gone;
    rmSync(dir, { recursive: true, force: true });
  }
}

const b = spawnSync("npm", ["run", "--silent", "build"], { stdio: "inherit" });
if (b.status !== 0) process.exit(1);
const results: Record<Build, Array<Awaited<ReturnType<typeof once>>>> = { compiled: [], loader: [] };
for (let i = 0; i < ROUNDS; i++) for (const build of Object.keys(builds) as Build[]) results[build].push(await once(build));

const median = (xs: number[]) => [...xs].sort((a, c) => a - c)[Math.floor(xs.length / 2)]!;
console.log(`space api startup, ${ROUNDS} round(s) each (median; min-max)`);
console.log("build      ready ms             RSS ready MiB     RSS idle MiB");
for (const build of Object.keys(builds) as Build[]) {
  const col = (k: "readyMs" | "rssReady" | "rssIdle") => {
    const xs = results[build].map((r) => r[k]);
    return `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`.padEnd(18);
  };
  console.log(`${build.padEnd(10)} ${col("readyMs")} ${col("rssReady")} ${col("rssIdle")}`);
}
