/**
 * What btrfs quotas cost when a sandbox disk is deleted. A node's sandbox disks are
 * snapshots of their template; with classic qgroups on (they enforce `disk_mib`), dropping
 * one makes the kernel's btrfs-cleaner account every extent it shared with the template.
 * Simple quotas (what the node cache uses, scripts/setup/btrfs-squota.c) charge an extent to
 * the subvolume that wrote it and skip that. Runs the same workload on three scratch loop
 * filesystems, quotas off (the baseline), simple and classic: a template of `--files` files
 * of 10 KB, `--snapshots` snapshots each with one new file, then delete them all and wait
 * for the cleaner (`btrfs subvolume sync`).
 *
 *   npm run bench -- btrfs-quota [--files 20000] [--snapshots 20] [--json]
 *
 * Prints, per deleted snapshot, the CPU the kernel's btrfs-cleaner threads spent (what
 * competes with sandboxes on a node) and the wall time (total / snapshots: the cleaner
 * works through the batch, so there is no per-snapshot median), and the ratios to "off".
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { exec } from "../src/core/exec.ts";

type Mode = "off" | "simple" | "classic";
// From the repository root, where `npm run bench` runs (the bench itself runs bundled under dist/space/).
const SQUOTA = join(process.cwd(), ".tools", "bin", "btrfs-squota");
const TICK_MS = 1000 / 100; // USER_HZ

/** CPU ms spent so far by each btrfs-cleaner kernel thread (one per mounted btrfs), by pid. */
async function cleanerCpuMs(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = (await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "")).trim();
    const m = /^\d+ \((btrfs-cleaner)\) (.*)$/.exec(stat);
    if (!m) continue;
    const f = m[2]!.split(" ");
    out.set(pid, (Number(f[11]) + Number(f[12])) * TICK_MS); // utime, stime
  }
  return out;
}

/** CPU spent between two samples by the cleaner threads alive at both (others' filesystems come and go). */
const cpuBetween = (a: Map<string, number>, b: Map<string, number>) => [...b].reduce((sum, [pid, ms]) => sum + (a.has(pid) ? ms - a.get(pid)! : 0), 0);

interface Result {
  mode: Mode;
  cleanerCpuMsPerSnapshot: number;
  wallMsPerSnapshot: number;
}

async function run(mode: Mode, files: number, snapshots: number): Promise<Result> {
  const dir = await mkdtemp(join(tmpdir(), "space-bench-quota-"));
  const img = join(dir, "fs.img");
  const mnt = join(dir, "mnt");
  await mkdir(mnt);
  await exec("truncate", ["-s", "4G", img]);
  await exec("mkfs.btrfs", ["-q", img]);
  await exec("mount", ["-o", "loop,noatime", img, mnt]);
  try {
    // Simple quotas must be on before the template is written: they charge only new extents.
    if (mode === "simple") await exec(SQUOTA, [mnt]);
    const tpl = join(mnt, "tpl");
    await exec("btrfs", ["subvolume", "create", tpl]);
    for (let d = 0; d < Math.ceil(files / 100); d++) {
      await mkdir(join(tpl, `d${d}`));
      await Promise.all(Array.from({ length: Math.min(100, files - d * 100) }, (_, f) => writeFile(join(tpl, `d${d}`, `f${f}`), randomBytes(10_000))));
    }
    await exec("sync", []);
    if (mode === "classic") {
      await exec("btrfs", ["quota", "enable", mnt]);
      await exec("btrfs", ["quota", "rescan", "-w", mnt], { timeoutMs: 600_000 });
    }
    await exec("btrfs", ["property", "set", tpl, "ro", "true"]);
    for (let i = 0; i < snapshots; i++) {
      await exec("btrfs", ["subvolume", "snapshot", tpl, join(mnt, `s${i}`)]);
      await writeFile(join(mnt, `s${i}`, "new"), "x");
    }
    await exec("sync", []);
    const cpu0 = await cleanerCpuMs();
    const t0 = performance.now();
    for (let i = 0; i < snapshots; i++) await exec("btrfs", ["subvolume", "delete", join(mnt, `s${i}`)]);
    await exec("btrfs", ["subvolume", "sync", mnt], { timeoutMs: 1_800_000 });
    const wallMs = performance.now() - t0;
    const cpuMs = cpuBetween(cpu0, await cleanerCpuMs());
    return { mode, cleanerCpuMsPerSnapshot: Math.round(cpuMs / snapshots), wallMsPerSnapshot: Math.round(wallMs / snapshots) };
  } finally {
    await exec("umount", [mnt], { allowFailure: true });
    await rm(dir, { recursive: true, force: true });
  }
}

const { values } = parseArgs({
  options: { files: { type: "string", default: "20000" }, snapshots: { type: "string", default: "20" }, json: { type: "boolean", default: false } },
});
const files = Number(values.files);
const snapshots = Number(values.snapshots);
if (!Number.isInteger(files) || files < 100 || !Number.isInteger(snapshots) || snapshots < 1) {
  process.stderr.write(`--files must be an integer >= 100 (got ${values.files}), --snapshots >= 1 (got ${values.snapshots})\n`);
  process.exit(2);
}
const results: Result[] = [];
for (const mode of ["off", "simple", "classic"] as const) results.push(await run(mode, files, snapshots));
const off = results[0]!;
const ratio = (r: Result, k: "cleanerCpuMsPerSnapshot" | "wallMsPerSnapshot") => Math.round((r[k] / Math.max(1, off[k])) * 10) / 10;
if (values.json) process.stdout.write(JSON.stringify({ bench: "btrfs-quota", files, snapshots, results }, null, 2) + "\n");
else {
  process.stdout.write(`btrfs snapshot delete + cleaner, template of ${files} files, ${snapshots} snapshots; per snapshot:\n`);
  for (const r of results) {
    const label = r.mode === "off" ? "quotas off (baseline)" : `${r.mode} quotas`;
    process.stdout.write(`  ${label.padEnd(22)} cleaner CPU ${String(r.cleanerCpuMsPerSnapshot).padStart(5)} ms  wall ${String(r.wallMsPerSnapshot).padStart(5)} ms (${ratio(r, "wallMsPerSnapshot")}x)\n`);
  }
}
