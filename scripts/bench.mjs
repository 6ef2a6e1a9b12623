// `npm run bench -- <name> [args]` runs bench/<name>.ts; without a name it lists them.
import { readdirSync } from "node:fs";
import { spawnSync } from "node:child_process";

const names = readdirSync("bench").filter((f) => f.endsWith(".ts")).map((f) => f.slice(0, -3)).sort();
const [name, ...args] = process.argv.slice(2);
if (!name || !names.includes(name)) {
  process.stderr.write(`${name ? `no benchmark named ${JSON.stringify(name)}\n` : ""}usage: npm run bench -- <${names.join("|")}> [args]\n`);
  process.exit(name ? 2 : 0);
}
const r = spawnSync(process.execPath, ["--import", "tsx", `bench/${name}.ts`, ...args], { stdio: "inherit" });
process.exit(r.status ?? 1);
