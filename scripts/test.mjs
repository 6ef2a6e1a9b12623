// Runs every *.test.ts under src/ and test/ with node's test runner (files one at a time:
// end-to-end suites share the machine's runtime, network and ports).
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

function find(dir, out) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (name === "node_modules") continue;
    if (statSync(p).isDirectory()) find(p, out);
    else if (name.endsWith(".test.ts")) out.push(p);
  }
  return out;
}
const filter = process.argv.slice(2);
let files = [...find("src", []), ...find("test", [])].sort();
if (filter.length) files = files.filter((f) => filter.some((x) => f.includes(x)));
const r = spawnSync(
  process.execPath,
  ["--import", "tsx", "--test", "--test-concurrency=1", "--test-reporter=spec", ...files],
  { stdio: "inherit" },
);
process.exit(r.status ?? 1);
