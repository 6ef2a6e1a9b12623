/**
 * scripts/clean-leftovers.sh tells leftovers from live objects: a bridge, nft table and
 * netns nothing owns are removed; a bridge a process listens on (and its table), a netns
 * with a process and a netns a live process names are kept; with --orphan-sandboxes, a
 * "sandbox" (a netns with a process) on a bridge no node serves is killed and removed with
 * its bridge. CLEAN_LEFTOVERS_ONLY keeps the script to this test's objects: the machine
 * may be shared with other runs.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { describe, it } from "node:test";
import { pickSlotRange } from "../support/node-network-cleanup.ts";

const isRoot = process.getuid?.() === 0;

function sh(cmd: string, args: string[], input?: string): string {
  const r = spawnSync(cmd, args, { encoding: "utf8", input });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

describe("clean-leftovers.sh", { skip: isRoot ? false : "root needed (bridges, nft, netns)" }, () => {
  it("removes what no live process owns, keeps what one does, kills orphan sandboxes on request", async () => {
    const tag = randomBytes(3).toString("hex");
    const stale = { bridge: `spcls${tag}`, table: `space_cls${tag}`, netns: `spcls${tag}` };
    const live = { bridge: `spcll${tag}`, table: `space_cll${tag}`, netns: `spcll${tag}`, named: `spcln${tag}` };
    const orphan = { bridge: `spclo${tag}`, table: `space_clo${tag}`, netns: `spclo${tag}`, veth: `spclv${tag}` };
    const staleSlot = `sxcls${tag}-${"a".repeat(14)}${tag}`;
    const address = (bridge: string) => pickSlotRange(bridge, bridge).replace(/0\/24$/, "1/24");
    const run = (...args: string[]) => {
      const r = spawnSync("bash", ["scripts/clean-leftovers.sh", ...args], {
        encoding: "utf8",
        env: { ...process.env, CLEAN_LEFTOVERS_MIN_AGE_S: "0", CLEAN_LEFTOVERS_ONLY: `cl.${tag}` },
      });
      assert.equal(r.status, 0, r.stderr);
      return r.stdout;
    };
    const exists = (argv: string[]) => spawnSync(argv[0]!, argv.slice(1)).status === 0;
    const sleepers: ReturnType<typeof spawn>[] = [];
    const server = createServer();
    try {
      for (const x of [stale, live, orphan]) {
        sh("ip", ["link", "add", x.bridge, "type", "bridge"]);
        sh("ip", ["addr", "add", address(x.bridge), "dev", x.bridge]);
        sh("nft", ["-f", "-"], `table inet ${x.table} {\n  chain forward {\n    type filter hook forward priority filter; policy accept;\n    iifname "${x.bridge}" accept\n  }\n}\n`);
        sh("ip", ["netns", "add", x.netns]);
      }
      sh("ip", ["netns", "add", live.named]);
      // A slot's namespace of a node whose bridge is an sx* one (test stacks): `<bridge>-<sandbox id>`.
      sh("ip", ["netns", "add", staleSlot]);
      sh("ip", ["link", "add", orphan.veth, "type", "veth", "peer", "name", "eth0", "netns", orphan.netns]);
      sh("ip", ["link", "set", orphan.veth, "master", orphan.bridge, "up"]);
      await new Promise<void>((r) => server.listen(0, address(live.bridge).split("/")[0], r));
      const inLive = spawn("nsenter", [`--net=/run/netns/${live.netns}`, "sleep", "120"], { stdio: "ignore" });
      const inOrphan = spawn("nsenter", [`--net=/run/netns/${orphan.netns}`, "sleep", "120"], { stdio: "ignore" });
      sleepers.push(inLive, inOrphan, spawn("sh", ["-c", "sleep 120", `/run/netns/${live.named}`], { stdio: "ignore" }));
      await new Promise((r) => setTimeout(r, 300));

      const dry = run("--dry-run");
      assert.match(dry, new RegExp(`would remove bridge ${stale.bridge} `));
      assert.match(dry, new RegExp(`would remove nft table inet ${stale.table}\\n`));
      assert.match(dry, new RegExp(`would remove netns ${stale.netns}\\n`));
      assert.match(dry, new RegExp(`would remove netns ${staleSlot}\\n`));
      assert.match(dry, new RegExp(`kept bridge ${live.bridge} \\(a process listens on `));
      assert.match(dry, new RegExp(`kept nft table inet ${live.table} \\(its rules name live bridge ${live.bridge}\\)`));
      assert.match(dry, new RegExp(`kept netns ${live.netns} \\(it has processes\\)`));
      assert.match(dry, new RegExp(`kept netns ${live.named} \\(a live process names it\\)`));
      // Without --orphan-sandboxes a sandbox's processes keep its bridge.
      assert.match(dry, new RegExp(`kept bridge ${orphan.bridge} \\(port ${orphan.veth} leads to netns ${orphan.netns}, which has processes\\)`));
      assert.ok(exists(["ip", "link", "show", stale.bridge]), "a dry run removed something");

      const out = run("--orphan-sandboxes");
      assert.match(out, new RegExp(`removed sandbox processes in netns ${orphan.netns} `));
      for (const x of [stale, orphan]) {
        assert.ok(!exists(["ip", "link", "show", x.bridge]), `${x.bridge} still there:\n${out}`);
        assert.ok(!exists(["nft", "list", "table", "inet", x.table]), `${x.table} still there:\n${out}`);
        assert.ok(!sh("ip", ["netns", "list"]).includes(x.netns), `${x.netns} still there:\n${out}`);
      }
      assert.ok(!sh("ip", ["netns", "list"]).includes(staleSlot), `${staleSlot} still there:\n${out}`);
      assert.notEqual(await new Promise((r) => (inOrphan.exitCode !== null || inOrphan.signalCode !== null ? r(inOrphan.signalCode) : inOrphan.once("exit", (_c, s) => r(s)))), null);
      assert.ok(exists(["ip", "link", "show", live.bridge]) && exists(["nft", "list", "table", "inet", live.table]));
      assert.ok(sh("ip", ["netns", "list"]).includes(live.netns) && sh("ip", ["netns", "list"]).includes(live.named));
      assert.equal(inLive.exitCode, null, "a live process was killed");
    } finally {
      for (const s of sleepers) s.kill("SIGKILL");
      server.close();
      for (const x of [stale, live, orphan]) {
        spawnSync("nft", ["delete", "table", "inet", x.table]);
        spawnSync("ip", ["link", "delete", x.bridge]);
        spawnSync("ip", ["netns", "delete", x.netns]);
      }
      spawnSync("ip", ["netns", "delete", live.named]);
      spawnSync("ip", ["netns", "delete", staleSlot]);
    }
  });
});
