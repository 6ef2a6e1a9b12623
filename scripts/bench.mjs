// `npm run bench -- <name> [args]` runs bench/<name>.ts; without a name it lists them.
//
// A benchmark measures the product as it ships: the CLI is compiled first (scripts/build.mjs),
// every `space` process the bench starts runs that build (SPACE_E2E_COMPILED=1), and the
// bench itself is bundled beside it (dist/space/bench-<name>.mjs, where the product code it
// runs in process finds its migrations and helpers) and run without the TypeScript loader:
// tsx compiles with esbuild's keepNames, which wraps every function a call creates, and made
// a placement decision over 10,000 nodes 2.4× slower than the build (docs/scale.md).
import { readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { build } from "esbuild";

const names = readdirSync("bench").filter((f) => f.endsWith(".ts")).map((f) => f.slice(0, -3)).sort();
const [name, ...args] = process.argv.slice(2);
if (!name || !names.includes(name)) {
  process.stderr.write(`${name ? `no benchmark named ${JSON.stringify(name)}\n` : ""}usage: npm run bench -- <${names.join("|")}> [args]\n`);
  process.exit(name ? 2 : 0);
}
// A bench run by another (ttfc runs node) uses the build its runner made: building again
// would replace dist/space/ under the outer bench's running `space` processes.
if (process.env.SPACE_BENCH_BUILT !== "1") {
  const built = spawnSync(process.execPath, ["scripts/build.mjs"], { stdio: "inherit" });
  if (built.status !== 0) process.exit(built.status ?? 1);
}
const outfile = join("dist", "space", `bench-${name}.mjs`);
await build({
  entryPoints: [join("bench", `${name}.ts`)],
  outfile,
  bundle: true,
  packages: "external",
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "linked",
  logLevel: "warning",
});
const r = spawnSync(process.execPath, ["--enable-source-maps", outfile, ...args], { stdio: "inherit", env: { ...process.env, SPACE_E2E_COMPILED: "1", SPACE_BENCH_BUILT: "1" } });
process.exit(r.status ?? 1);
