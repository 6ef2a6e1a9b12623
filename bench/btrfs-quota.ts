/**
 * What btrfs quotas cost when a sandbox disk is deleted. A node's sandbox disks are
 * snapshots of their template; with qgroups on (they enforce `disk_mib`), dropping one
 * makes the kernel's btrfs-cleaner account every extent it shared with the template.
 * Runs the same workload on two scratch loop filesystems, quotas off (the baseline) and
 * on: a template of `--files` files of 10 KB, `--snapshots` snapshots each with one new
 * file, then delete them all and wait for the cleaner (`btrfs subvolume sync`).
 *
 *   npm run bench -- btrfs-quota [--files 20000] [--snapshots 20] [--json]
 *
 * Prints the time per deleted snapshot (total / snapshots: the cleaner works through the
 * batch, so there is no per-snapshot median) and the on/off ratio.
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { exec } from "../src/core/exec.ts";

async function run(quota: boolean, files: number, snapshots: number): Promise<{ quota: boolean; deleteMsPerSnapshot: number; totalMs: number }> {
  const dir = await mkdtemp(join(tmpdir(), "space-bench-quota-"));
  const img = join(dir, "fs.img");
  const mnt = join(dir, "mnt");
  await mkdir(mnt);
  await exec("truncate", ["-s", "4G", img]);
  await exec("mkfs.btrfs", ["-q", img]);
  await exec("mount", ["-o", "loop,noatime", img, mnt]);
  try {
    const tpl = join(mnt, "tpl");
    await exec("btrfs", ["subvolume", "create", tpl]);
    for (let d = 0; d < Math.ceil(files / 100); d++) {
      await mkdir(join(tpl, `d${d}`));
      await Promise.all(Array.from({ length: Math.min(100, files - d * 100) }, (_, f) => writeFile(join(tpl, `d${d}`, `f${f}`), randomBytes(10_000))));
    }
    await exec("sync", []);
    if (quota) {
      await exec("btrfs", ["quota", "enable", mnt]);
      await exec("btrfs", ["quota", "rescan", "-w", mnt], { timeoutMs: 600_000 });
    }
    await exec("btrfs", ["property", "set", tpl, "ro", "true"]);
    for (let i = 0; i < snapshots; i++) {
      await exec("btrfs", ["subvolume", "snapshot", tpl, join(mnt, `s${i}`)]);
      await writeFile(join(mnt, `s${i}`, "new"), "x");
    }
    await exec("sync", []);
    const t0 = performance.now();
    for (let i = 0; i < snapshots; i++) await exec("btrfs", ["subvolume", "delete", join(mnt, `s${i}`)]);
    await exec("btrfs", ["subvolume", "sync", mnt], { timeoutMs: 1_800_000 });
    const totalMs = performance.now() - t0;
    return { quota, deleteMsPerSnapshot: Math.round(totalMs / snapshots), totalMs: Math.round(totalMs) };
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
const off = await run(false, files, snapshots);
const on = await run(true, files, snapshots);
const ratio = Math.round((on.deleteMsPerSnapshot / Math.max(1, off.deleteMsPerSnapshot)) * 10) / 10;
if (values.json) process.stdout.write(JSON.stringify({ bench: "btrfs-quota", files, snapshots, off, on, ratio }, null, 2) + "\n");
else {
  process.stdout.write(`btrfs snapshot delete + cleaner, template of ${files} files, ${snapshots} snapshots\n`);
  process.stdout.write(`  quotas off (baseline)  ${off.deleteMsPerSnapshot} ms per snapshot (${off.totalMs} ms total)\n`);
  process.stdout.write(`  quotas on              ${on.deleteMsPerSnapshot} ms per snapshot (${on.totalMs} ms total)\n`);
  process.stdout.write(`  on/off: ${ratio}x\n`);
}
