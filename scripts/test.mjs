// `npm test [-- <substring> ...]`: prepares what the selected lanes need, says at the top
// which lanes run and which are skipped (with the one command that enables each), runs
// every *.test.ts under src/ and test/ with node's test runner (files one at a time:
// end-to-end suites share the machine's runtime, network and ports), and prints a
// summary per lane at the end.
//
// Preparation (each step only when a selected lane needs it and it is missing):
//   machine setup      bash scripts/setup.sh (Debian packages, CRIU, base template)
//   envd bundle        npm run build:envd
//   Postgres           bash scripts/ci-postgres.sh, then SPACE_TEST_DATABASE_URL is set
//   Kubernetes         bash scripts/setup/k8s.sh (builds kube-apiserver etc. the first time),
//                      bash scripts/setup/helm.sh (helm, likewise)
//   Python SDK venv    bash scripts/setup/python-sdk.sh
//   schemathesis venv  bash scripts/setup/schemathesis.sh (test/e2e/schemathesis.test.ts, test/e2e/review.test.ts)
//   local registry     bash scripts/setup/registry.sh (docker-registry for the registry template suites)
// SPACE_TEST_SKIP=kubernetes,postgres,python skips those lanes on purpose.
// SPACE_TEST_REQUIRE_LANES=1 (CI) fails the run when any selected lane is skipped.
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { LANES, laneOf } from "./test-lanes.mjs";

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
if (!files.length) {
  // Handing node --test no file would make it discover every file under the cwd itself.
  console.error(`test: no *.test.ts under src/ or test/ matches ${filter.map((x) => JSON.stringify(x)).join(", ")}`);
  process.exit(2);
}
const selected = new Set(files.map(laneOf));
// Postgres-engine suites live in files of several lanes; they need Postgres whenever a
// file that uses test/support/db.ts is selected.
const needsPostgres = files.some((f) => /support\/db\.ts|postgresSkipReason/.test(readFileSync(f, "utf8")));
const optOut = new Set((process.env.SPACE_TEST_SKIP ?? "").split(",").map((s) => s.trim()).filter(Boolean));
const isRoot = process.getuid?.() === 0;

const sh = (what, args, env = {}) => {
  console.log(`test: ${what}: ${args.join(" ")}`);
  const r = spawnSync(args[0], args.slice(1), { stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, ...env } });
  return r.status === 0;
};
const capture = (args) => spawnSync(args[0], args.slice(1), { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });

/** lane → why it is skipped and the command that enables it (absent: it runs). */
const skipped = new Map();
const skip = (lane, why, enable) => skipped.set(lane, { why, enable });

const rootLanes = ["node", "e2e", "fleet", "kubernetes", "python"];
if (!isRoot) {
  for (const l of rootLanes) skip(l, "needs root (runc, btrfs, network namespaces)", "sudo npm test");
} else if ([...selected].some((l) => rootLanes.includes(l))) {
  const criu = existsSync(".tools/criu/criu");
  const template = existsSync(".tools/templates") && readdirSync(".tools/templates").some((f) => f.endsWith(".tar"));
  if (!criu || !template || !existsSync(".tools/bin/btrfs-squota")) sh("machine setup", ["bash", "scripts/setup.sh"]);
  if (!existsSync("dist/envd/envd.mjs")) sh("envd bundle", ["npm", "run", "--silent", "build:envd"]);
  // The registry template suites start local docker-registry instances (a machine set up before they existed lacks it).
  if (files.some((f) => /templates-registry|python-sdk\.test/.test(f)) && capture(["sh", "-c", "command -v docker-registry && command -v htpasswd"]).status !== 0) {
    sh("local registry", ["bash", "scripts/setup/registry.sh"]);
  }
  // The code interpreter's suites need its template's tarball (a machine set up before it existed lacks it; cached: seconds).
  if (files.some((f) => /test\/e2e\/(code-interpreter|python-sdk)\.test\.ts$/.test(f))) {
    sh("code-interpreter-v1 template", [process.execPath, "--import", "tsx", "scripts/setup/build-code-interpreter-template.ts"]);
  }
}
// The schemathesis e2e test skips with the reason when this failed; CI must not pass on that skip.
if (isRoot && files.some((f) => f.endsWith("test/e2e/schemathesis.test.ts") || f.endsWith("test/e2e/review.test.ts"))) {
  if (!sh("schemathesis venv", ["bash", "scripts/setup/schemathesis.sh"]) && process.env.SPACE_TEST_REQUIRE_LANES === "1") {
    console.error("test: the schemathesis venv did not install (SPACE_TEST_REQUIRE_LANES=1 needs every lane's tools)");
    process.exit(1);
  }
}

if (optOut.has("postgres")) {
  skip("postgres", "SPACE_TEST_SKIP names it", "unset SPACE_TEST_SKIP");
} else if (needsPostgres && !process.env.SPACE_TEST_DATABASE_URL) {
  if (isRoot && sh("Postgres", ["bash", "scripts/ci-postgres.sh"])) {
    process.env.SPACE_TEST_DATABASE_URL = "postgres://postgres:postgres@127.0.0.1:5432/postgres";
  } else {
    skip("postgres", "no Postgres (SPACE_TEST_DATABASE_URL unset)", "bash scripts/ci-postgres.sh && export SPACE_TEST_DATABASE_URL=postgres://postgres:postgres@127.0.0.1:5432/postgres");
  }
}
if (skipped.has("postgres")) {
  // Their node agents keep state in Postgres.
  for (const l of ["fleet", "kubernetes"]) if (!skipped.has(l)) skip(l, "needs the Postgres lane", skipped.get("postgres").enable);
}

if (selected.has("kubernetes") && !skipped.has("kubernetes")) {
  if (optOut.has("kubernetes")) skip("kubernetes", "SPACE_TEST_SKIP names it", "unset SPACE_TEST_SKIP");
  else {
    console.log("test: Kubernetes binaries (built from the Go modules the first time: ~4-20 min; SPACE_TEST_SKIP=kubernetes skips)");
    const r = capture(["bash", "scripts/setup/k8s.sh"]);
    if (r.status !== 0) skip("kubernetes", "scripts/setup/k8s.sh failed (its reason is printed above)", "bash scripts/setup/k8s.sh");
    // helm for the chart's suite (test/kubernetes/helm-chart.test.ts), built from its Go module too.
    else if (capture(["bash", "scripts/setup/helm.sh"]).status !== 0) skip("kubernetes", "scripts/setup/helm.sh failed (its reason is printed above)", "bash scripts/setup/helm.sh");
  }
}
if (selected.has("python") && !skipped.has("python")) {
  if (optOut.has("python")) skip("python", "SPACE_TEST_SKIP names it", "unset SPACE_TEST_SKIP");
  else if (!sh("Python SDK venv", ["bash", "scripts/setup/python-sdk.sh"])) skip("python", "scripts/setup/python-sdk.sh failed", "bash scripts/setup/python-sdk.sh");
}

const lanes = LANES.filter((l) => l.id === "postgres" ? needsPostgres : selected.has(l.id));
console.log("\ntest: lanes");
for (const l of lanes) {
  const s = skipped.get(l.id);
  console.log(s ? `  skip  ${l.title}: ${s.why}; enable: ${s.enable}` : `  run   ${l.title}`);
}
console.log("");

const out = mkdtempSync(join(tmpdir(), "space-test-"));
const summary = join(out, "lanes.json");
const r = spawnSync(
  process.execPath,
  [
    "--import", "tsx", "--test", "--test-concurrency=1",
    "--test-reporter=spec", "--test-reporter-destination=stdout",
    "--test-reporter=./scripts/test-lanes-reporter.mjs", `--test-reporter-destination=${summary}`,
    ...files,
  ],
  { stdio: "inherit" },
);
let counts = {};
try {
  counts = JSON.parse(readFileSync(summary, "utf8"));
} catch {
  console.log("test: no lane summary (the test runner ended early)");
}
rmSync(out, { recursive: true, force: true });
console.log("\ntest: lanes run and skipped");
let laneSkipped = false;
for (const l of lanes) {
  const c = counts[l.id] ?? { pass: 0, fail: 0, skip: 0, reasons: [] };
  const s = skipped.get(l.id);
  if (!s && c.pass + c.fail + c.skip === 0) {
    console.log(`  ${"-".padEnd(7)} ${l.title}: no test of this lane in the selection`);
    continue;
  }
  const state = c.fail ? "FAIL" : s || (c.pass === 0 && c.skip > 0) ? "skipped" : "ok";
  laneSkipped ||= state === "skipped";
  console.log(`  ${state.padEnd(7)} ${l.title}: ${c.pass} passed, ${c.fail} failed, ${c.skip} skipped${s ? ` (${s.why}; enable: ${s.enable})` : ""}`);
  for (const why of c.reasons.slice(0, 5)) console.log(`            skipped: ${why}`);
}
if (process.env.SPACE_TEST_REQUIRE_LANES === "1" && laneSkipped) {
  console.log("test: SPACE_TEST_REQUIRE_LANES=1 and a lane was skipped: failing the run");
  process.exit(1);
}
process.exit(r.status ?? 1);
