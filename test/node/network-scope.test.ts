/**
 * A node's slot range against the host's routes (the agent refuses a range another route
 * overlaps; harnesses pick one none does) and the harness removal of a node's network.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { createSocket } from "node:dgram";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { SpaceError } from "../../src/core/errors.ts";
import { createLogger } from "../../src/core/log.ts";
import { cidrsOverlap, conflictingRoutes } from "../../src/core/cidr.ts";
import { OPEN_POLICY } from "../../src/contract/egress-policy.ts";
import { LinuxNetworkSlots } from "../../src/node/network/slots.ts";
import { pickSlotRange, removeNodeNetwork } from "../support/node-network-cleanup.ts";

const isRoot = process.getuid?.() === 0;
const T = () => AbortSignal.timeout(60_000);

describe("slot range against host routes", () => {
  it("overlap: nested blocks overlap, neighbours and the default route do not count", () => {
    assert.equal(cidrsOverlap("10.200.0.0/16", "10.200.204.0/24"), true);
    assert.equal(cidrsOverlap("10.200.204.0/24", "10.200.0.0/16"), true);
    assert.equal(cidrsOverlap("10.200.204.0/24", "10.200.205.0/24"), false);
    assert.equal(cidrsOverlap("10.200.204.0/24", "10.200.204.9"), true);
    const routes = [{ dst: "default", dev: "eth0" }, { dst: "10.238.124.0/24", dev: "sx3187f4" }, { dst: "10.238.0.0/16", dev: "mine" }];
    assert.deepEqual(conflictingRoutes("10.238.124.0/24", "mine", routes), [{ dst: "10.238.124.0/24", dev: "sx3187f4" }]);
    assert.deepEqual(conflictingRoutes("10.238.125.0/24", "mine", routes), []);
  });

  it("harness pick: steps around every route but the node's own bridge's, same seed same range", () => {
    const free = pickSlotRange("seed-a", "brA", 24, []);
    assert.equal(pickSlotRange("seed-a", "brA", 24, []), free);
    const taken = [{ dst: free, dev: "stale0" }];
    const next = pickSlotRange("seed-a", "brA", 24, taken);
    assert.notEqual(next, free);
    assert.deepEqual(conflictingRoutes(next, "brA", taken), []);
    // A covering route (a /16 of another bridge) is a conflict too.
    const covered = pickSlotRange("seed-a", "brA", 24, [{ dst: `${free.split(".").slice(0, 2).join(".")}.0.0/16`, dev: "space0" }]);
    assert.equal(cidrsOverlap(covered, `${free.split(".").slice(0, 2).join(".")}.0.0/16`), false);
    // The node's own bridge from before a restart keeps its range.
    assert.equal(pickSlotRange("seed-b", "brA", 24, [{ dst: "10.231.7.0/24", dev: "brA" }]), "10.231.7.0/24");
    assert.match(pickSlotRange("seed-c", "brA", 20, []), /^10\.(22\d|23\d|24\d)\.\d+\.0\/20$/);
  });

  it(
    "agent refuses a range another bridge's route overlaps (naming both), reuses its own; the harness removes what a killed node left",
    { skip: isRoot ? false : "root needed (bridges, nft, netns)" },
    async () => {
      const tag = randomBytes(2).toString("hex");
      const dir = await mkdtemp(join(tmpdir(), "space-netscope-test-"));
      const a = { bridge: `sprA${tag}`, nftTable: `space_rA${tag}`, vethPrefix: `ra${tag}` };
      const b = { bridge: `sprB${tag}`, nftTable: `space_rB${tag}`, vethPrefix: `rb${tag}` };
      const cidr = pickSlotRange(dir, a.bridge);
      const slots = (s: typeof a, stateDir: string) =>
        new LinuxNetworkSlots({ cidr, maxSlots: 8, stateDir, ...s, pool: { target: 0, retainReady: 0, minReady: 0 }, logger: createLogger("warn", "netscope-test") });
      const aDir = join(dir, "a");
      try {
        await slots(a, aDir).init(() => false, T());
        const err = await slots(b, join(dir, "b"))
          .init(() => false, T())
          .then(() => undefined, (e: unknown) => e);
        assert.ok(err instanceof SpaceError, `expected a refusal, got ${String(err)}`);
        assert.equal(err.code, "failed_precondition");
        assert.match(err.message, new RegExp(`slot range ${cidr.replace(/\./g, "\\.")} .*overlaps the route ${cidr.replace(/\./g, "\\.")} dev ${a.bridge}`));
        const links = (await exec("ip", ["-o", "link", "show"])).stdout;
        assert.ok(!links.includes(`${b.bridge}:`), "the refused node created its bridge");

        // A restart of the same node (its bridge holds the route) is fine, and keeps a slot.
        const again = slots(a, aDir);
        await again.init(() => false, T());
        const slot = await again.claim(`netscope${tag}`, OPEN_POLICY, T());

        // A second agent given the same names while this one serves the bridge (its resolver
        // holds gateway:53) is refused before it rebuilds the table or sweeps the veths.
        const resolver = createSocket("udp4");
        await new Promise<void>((r) => resolver.bind({ address: slot.gateway, port: 53 }, r));
        try {
          const twin = await slots(a, join(dir, "twin"))
            .init(() => false, T())
            .then(() => undefined, (e: unknown) => e);
          assert.ok(twin instanceof SpaceError && twin.code === "failed_precondition", `expected a refusal, got ${String(twin)}`);
          assert.match(twin.message, new RegExp(`bridge ${a.bridge} is in use: .*${slot.gateway.replace(/\./g, "\\.")}:53`));
          assert.match((await exec("nft", ["list", "table", "inet", a.nftTable])).stdout, new RegExp(slot.address.replace(/\./g, "\\.")), "the slot's rules were rebuilt away");
          assert.ok((await exec("ip", ["-o", "link", "show"])).stdout.includes(`${slot.hostVeth}@`), "the slot's veth was swept");
        } finally {
          resolver.close();
        }
        // Killed here: nothing released. The harness removes slot, veth, tables, bridge.
        const removed = removeNodeNetwork({ ...a, slotsDir: aDir });
        assert.deepEqual(removed.sort(), [`bridge ${a.bridge}`, `netns ${slot.netns}`, `nft table bridge ${a.nftTable}`, `nft table inet ${a.nftTable}`, `veth ${slot.hostVeth}`].sort());
        const after = await exec("ip", ["-o", "link", "show"]);
        assert.ok(!after.stdout.includes(`${a.bridge}:`) && !after.stdout.includes(`${slot.hostVeth}@`));
        assert.ok(!(await exec("ip", ["netns", "list"])).stdout.includes(slot.netns));
        assert.ok(!(await exec("nft", ["list", "tables"])).stdout.includes(a.nftTable));
        assert.ok(!(await exec("ip", ["-4", "route", "show"])).stdout.includes(cidr));
        assert.deepEqual(removeNodeNetwork({ ...a, slotsDir: aDir }), []);
      } finally {
        removeNodeNetwork({ ...a, slotsDir: aDir });
        removeNodeNetwork(b);
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
