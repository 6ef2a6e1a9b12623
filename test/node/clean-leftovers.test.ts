/**
 * scripts/clean-leftovers.sh tells leftovers from live objects: a bridge, nft table and
 * netns nothing owns are listed for removal; a bridge a process listens on (and its
 * table), a netns with a process and a netns a live process names are kept. Dry run
 * only, so it never removes anything on a machine shared with other runs.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { describe, it } from "node:test";
import { pickSlotRange } from "../support/node-network-cleanup.ts";

const isRoot = process.getuid?.() === 0;

function sh(cmd: string, args: string[], input?: string): void {
  const r = spawnSync(cmd, args, { encoding: "utf8", input });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${r.stderr}`);
}

describe("clean-leftovers.sh", { skip: isRoot ? false : "root needed (bridges, nft, netns)" }, () => {
  it("lists what no live process owns and keeps what one does", async () => {
    const tag = randomBytes(2).toString("hex");
    const stale = { bridge: `spcls${tag}`, table: `space_cls${tag}`, netns: `spcls${tag}` };
    const live = { bridge: `spcll${tag}`, table: `space_cll${tag}`, netns: `spcll${tag}`, named: `spcln${tag}` };
    const address = (bridge: string) => pickSlotRange(bridge, bridge).replace(/0\/24$/, "1/24");
    const sleepers: ReturnType<typeof spawn>[] = [];
    const server = createServer();
    try {
      for (const x of [stale, live]) {
        sh("ip", ["link", "add", x.bridge, "type", "bridge"]);
        sh("ip", ["addr", "add", address(x.bridge), "dev", x.bridge]);
        sh("nft", ["-f", "-"], `table inet ${x.table} {\n  chain forward {\n    type filter hook forward priority filter; policy accept;\n    iifname "${x.bridge}" accept\n  }\n}\n`);
        sh("ip", ["netns", "add", x.netns]);
      }
      sh("ip", ["netns", "add", live.named]);
      await new Promise<void>((r) => server.listen(0, address(live.bridge).split("/")[0], r));
      sleepers.push(spawn("nsenter", [`--net=/run/netns/${live.netns}`, "sleep", "120"], { stdio: "ignore" }));
      sleepers.push(spawn("sh", ["-c", "sleep 120", `/run/netns/${live.named}`], { stdio: "ignore" }));
      await new Promise((r) => setTimeout(r, 300));

      const r = spawnSync("bash", ["scripts/clean-leftovers.sh", "--dry-run"], { encoding: "utf8", env: { ...process.env, CLEAN_LEFTOVERS_MIN_AGE_S: "0" } });
      assert.equal(r.status, 0, r.stderr);
      const out = r.stdout;
      assert.match(out, new RegExp(`would remove bridge ${stale.bridge} `));
      assert.match(out, new RegExp(`would remove nft table inet ${stale.table}\\n`));
      assert.match(out, new RegExp(`would remove netns ${stale.netns}\\n`));
      assert.match(out, new RegExp(`kept bridge ${live.bridge} \\(a process listens on `));
      assert.match(out, new RegExp(`kept nft table inet ${live.table} \\(its rules name live bridge ${live.bridge}\\)`));
      assert.match(out, new RegExp(`kept netns ${live.netns} \\(it has processes\\)`));
      assert.match(out, new RegExp(`kept netns ${live.named} \\(a live process names it\\)`));
      // A dry run removes nothing.
      assert.match(spawnSync("ip", ["-o", "link", "show", stale.bridge], { encoding: "utf8" }).stdout, new RegExp(stale.bridge));
    } finally {
      for (const s of sleepers) s.kill("SIGKILL");
      server.close();
      for (const x of [stale, live]) {
        spawnSync("nft", ["delete", "table", "inet", x.table]);
        spawnSync("ip", ["link", "delete", x.bridge]);
        spawnSync("ip", ["netns", "delete", x.netns]);
      }
      spawnSync("ip", ["netns", "delete", live.named]);
    }
  });
});
