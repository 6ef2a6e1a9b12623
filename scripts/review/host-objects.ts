/**
 * The host objects a review's stack may leave behind, counted per kind: everything a node
 * names after a sandbox (runc containers, veths of its prefix, nft chains and sets, mounts,
 * cgroups, btrfs subvolumes, processes) plus the veths of its prefix beyond the idle
 * baseline (the slot pool). Scoped to this stack's host scope and the sandbox ids the
 * review made, so other stacks on the machine never count.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

export type HostObjects = Record<"containers" | "veths" | "nft" | "mounts" | "cgroups" | "subvolumes" | "processes", string[]>;

export interface Scope {
  dataDir: string;
  stateDir: string;
  vethPrefix: string;
  nftTable: string;
  cgroupParent: string;
}

const out = (argv: string[]) => spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8" }).stdout ?? "";

export function hostObjects(s: Scope, ids: ReadonlySet<string>): HostObjects {
  const named = (text: string) => [...ids].some((id) => text.includes(id));
  const containers = existsSync(s.stateDir) ? out(["runc", "--root", s.stateDir, "list", "-q"]).split("\n").filter(Boolean) : [];
  const links = JSON.parse(out(["ip", "-j", "link", "show"]) || "[]") as Array<{ ifname: string }>;
  const veths = links.map((l) => l.ifname).filter((n) => new RegExp(`^${s.vethPrefix}\\d+$`).test(n));
  const table = out(["nft", "list", "table", "inet", s.nftTable]);
  const nft = table
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => /^(chain|set|map) /.test(l) && named(l));
  const mounts = readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .filter((l) => named(l));
  const cgroups: string[] = [];
  for (const ctl of existsSync("/sys/fs/cgroup") ? readdirSync("/sys/fs/cgroup") : []) {
    const dir = join("/sys/fs/cgroup", ctl, s.cgroupParent);
    if (!existsSync(dir)) continue;
    for (const d of readdirSync(dir, { withFileTypes: true })) if (d.isDirectory() && named(d.name)) cgroups.push(join(dir, d.name));
  }
  const roots = join(s.dataDir, "node", "roots");
  const subvolumes = existsSync(roots) ? readdirSync(roots).filter((n) => named(n)) : [];
  const processes = out(["ps", "-eo", "pid=,args="])
    .split("\n")
    .filter((l) => l.trim() && (named(l) || l.includes(s.stateDir)) && !l.includes(" ps -eo"));
  return { containers, veths, nft, mounts, cgroups, subvolumes, processes };
}

/** What `after` holds beyond `before`: named objects all count; veths only above the baseline's number. */
export function leaked(before: HostObjects, after: HostObjects): string[] {
  const lines: string[] = [];
  for (const kind of Object.keys(after) as (keyof HostObjects)[]) {
    if (kind === "veths") {
      const extra = after.veths.length - before.veths.length;
      if (extra > 0) lines.push(`veths: ${extra} more than the idle node's ${before.veths.length} (${after.veths.filter((v) => !before.veths.includes(v)).join(", ")})`);
      continue;
    }
    for (const o of after[kind]) if (!before[kind].includes(o)) lines.push(`${kind}: ${o.slice(0, 200)}`);
  }
  return lines;
}
