/**
 * A slot released with `keep` (a suspend): it stays set up for its owner's return, an open of
 * the owner takes it back under the policy it asks for, and it goes after `keepMs` or when
 * the node drains. An open of an owner whose slot is being torn down waits for the teardown
 * (the namespace's name is the same).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { createLogger } from "../../src/core/log.ts";
import { CLOSED_POLICY, OPEN_POLICY } from "../../src/contract/egress-policy.ts";
import { LinuxNetworkSlots } from "../../src/node/network/slots.ts";
import { pickSlotRange, removeNodeNetwork } from "../support/node-network-cleanup.ts";

const isRoot = process.getuid?.() === 0;
const T = () => AbortSignal.timeout(60_000);
const KEEP_MS = 600;

describe("kept network slots", { skip: isRoot ? false : "root needed (bridges, nft, netns)" }, () => {
  const tag = randomBytes(2).toString("hex");
  const scope = { bridge: `spk${tag}`, nftTable: `space_k${tag}`, vethPrefix: `k${tag}` };
  let dir: string;
  let slots: LinuxNetworkSlots;
  const ruleset = async () => (await exec("nft", ["list", "table", "inet", scope.nftTable])).stdout;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "space-slot-keep-test-"));
    slots = new LinuxNetworkSlots({
      cidr: pickSlotRange(dir, scope.bridge),
      maxSlots: 8,
      stateDir: join(dir, "slots"),
      ...scope,
      pool: { target: 0, retainReady: 0, minReady: 0 },
      keepMs: KEEP_MS,
      logger: createLogger("warn", "slot-keep-test"),
    });
    await slots.init(() => false, T());
  });
  after(async () => {
    await slots?.destroy(T()).catch(() => undefined);
    removeNodeNetwork({ ...scope, slotsDir: join(dir, "slots") });
    await rm(dir, { recursive: true, force: true });
  });

  it("is taken back by its owner under the policy it asks for, the same namespace and address", async () => {
    const owner = `keepa${tag}`;
    const slot = await slots.claim(owner, OPEN_POLICY, T());
    const ino = statSync(slot.netnsPath).ino;
    const open = await ruleset();
    await slots.release(owner, T(), { keep: true });
    assert.ok(existsSync(slot.netnsPath), "kept: the namespace is still there");
    assert.equal(slots.inUse(), 1);
    const back = await slots.open(owner, CLOSED_POLICY, T());
    await back.configured;
    assert.equal(back.slot.address, slot.address);
    assert.equal(statSync(back.slot.netnsPath).ino, ino, "the same namespace, not a new one");
    assert.deepEqual(slots.get(owner)?.policy, CLOSED_POLICY);
    assert.notEqual(await ruleset(), open, "the new policy is in the node's rules");
    // Taken back: the keep's timer no longer runs.
    await new Promise((r) => setTimeout(r, KEEP_MS + 300));
    assert.ok(existsSync(slot.netnsPath), "still there past the keep: its owner has it");
    await slots.release(owner, T());
    assert.ok(!existsSync(slot.netnsPath));
    assert.equal(slots.inUse(), 0);
  });

  it("goes after keepMs when its owner does not come back, and at a drain", async () => {
    const a = await slots.claim(`keepb${tag}`, OPEN_POLICY, T());
    await slots.release(`keepb${tag}`, T(), { keep: true });
    const deadline = Date.now() + KEEP_MS + 10_000;
    while (existsSync(a.netnsPath) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.ok(!existsSync(a.netnsPath), "released after the keep");
    assert.ok(!(await ruleset()).includes(`${a.address} `), "its rules are gone");
    assert.equal(slots.inUse(), 0);

    const b = await slots.claim(`keepc${tag}`, OPEN_POLICY, T());
    await slots.release(`keepc${tag}`, T(), { keep: true });
    await slots.drainPool(T());
    assert.ok(!existsSync(b.netnsPath), "a drain releases kept slots");
    assert.equal(slots.inUse(), 0);
  });

  it("an open of an owner whose slot is being torn down waits for it", async () => {
    const owner = `keepd${tag}`;
    await slots.claim(owner, OPEN_POLICY, T());
    const releasing = slots.release(owner, T());
    const again = await slots.open(owner, OPEN_POLICY, T());
    await again.configured;
    await releasing;
    assert.ok(existsSync(again.slot.netnsPath), "the new slot's namespace survived the old one's teardown");
    await slots.release(owner, T());
  });
});
