/**
 * The placement directory snapshot (src/substrate/cached-node-directory.ts) and how the
 * Direct substrate decides on it: one read per age, stale served while one refresh runs,
 * starts the snapshot predates still counted, refusals re-checked on fresh rows. Nodes are
 * the real node-api app over the memory manager (memory-node.ts); the rows are a directory
 * double whose answers the test changes as heartbeats would.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { pino } from "pino";
import { CachedNodeDirectory } from "../../src/substrate/cached-node-directory.ts";
import { DirectSubstrate } from "../../src/substrate/direct/direct-substrate.ts";
import type { NodeDirectory, NodeEntry } from "../../src/substrate/node-directory.ts";
import type { SandboxSpec } from "../../src/contract/node-api.ts";
import { SpaceError } from "../../src/core/errors.ts";
import { MemoryNode } from "./memory-node.ts";
import { believedCapacityLedger, type CapacityLedger, type NodeHeld } from "../../src/substrate/capacity.ts";
import type { RejectReason } from "../../src/substrate/placement.ts";

const A = "00000000-0000-4000-8000-00000000000a";
const B = "00000000-0000-4000-8000-00000000000b";
const C = "00000000-0000-4000-8000-00000000000c";

/** The store's rows as a directory: what `used` says is set by the test (a heartbeat). */
class Rows implements NodeDirectory {
  reads = 0;
  used = new Map<string, number>();
  status = new Map<string, NodeEntry["status"]>();
  urls = new Map<string, string>();
  #gate: Promise<void> | undefined;
  /** Holds the next reads until `open()`. */
  hold(): () => void {
    let open!: () => void;
    this.#gate = new Promise((r) => (open = r));
    return () => {
      this.#gate = undefined;
      open();
    };
  }
  entry(id: string): NodeEntry {
    const vcpu = this.used.get(id) ?? 0;
    return {
      id,
      name: id.slice(-1),
      url: this.urls.get(id) ?? "http://127.0.0.1:9",
      status: this.status.get(id) ?? "ready",
      nodeGroup: "default",
      labels: {},
      capacity: { vcpu: 4, memoryMib: 65_536, diskMib: 0, networkSlots: 100 },
      used: { vcpu, memoryMib: 0, diskMib: 0, networkSlots: 0 },
      usableEnvironments: [],
      templates: [],
    };
  }
  /** The registered nodes. */
  ids = [A, B];
  async list(): Promise<NodeEntry[]> {
    this.reads++;
    await this.#gate;
    return this.ids.map((id) => this.entry(id));
  }
  async get(id: string): Promise<NodeEntry | null> {
    return this.entry(id);
  }
}

const signal = () => AbortSignal.timeout(10_000);

test("snapshot: one read per age, the stale one served while one refresh runs, a fresh read on request", async () => {
  const rows = new Rows();
  let now = 0;
  const dir = new CachedNodeDirectory(rows, 1000, () => now);
  await dir.list(signal());
  await dir.list(signal());
  assert.equal(rows.reads, 1, "within the age: the same read");

  rows.used.set(A, 3);
  now = 1500;
  const open = rows.hold();
  const stale = await dir.list(signal());
  assert.equal(stale.find((n) => n.id === A)!.used!.vcpu, 0, "past the age, under twice it: the old snapshot at once");
  assert.equal(rows.reads, 2, "and one refresh started");
  await dir.list(signal());
  assert.equal(rows.reads, 2, "one refresh at a time");
  open();
  await new Promise((r) => setImmediate(r));
  assert.equal((await dir.list(signal())).find((n) => n.id === A)!.used!.vcpu, 3, "the refreshed rows");

  rows.used.set(A, 4);
  assert.equal((await dir.list(signal(), { fresh: true })).find((n) => n.id === A)!.used!.vcpu, 4, "fresh reads through");
  now = 5000;
  const waited = await dir.list(signal());
  assert.equal(rows.reads, 4, "past twice the age: the caller waits for a new read");
  assert.equal(waited.find((n) => n.id === A)!.used!.vcpu, 4);
});

test("direct placement on a snapshot: a start it predates still counts, then the rows do; a refusal is re-read", async () => {
  const log = pino({ level: "silent" });
  const nodes = [new MemoryNode(A, "tok", log), new MemoryNode(B, "tok", log)];
  const rows = new Rows();
  try {
    for (const n of nodes) rows.urls.set(n.nodeId, await n.listen());
    let now = 0;
    const dir = new CachedNodeDirectory(rows, 1000, () => now);
    const sub = new DirectSubstrate({ nodes: dir, internalToken: "tok", overcommit: { vcpu: 1 } });
    const req = (sandboxId: string) => ({ sandboxId, templateId: "base", vcpu: 4, memoryMib: 256, diskMib: 1024 });
    const spec = (sandboxId: string): SandboxSpec => ({ sandboxId, executionId: `ex_${sandboxId}`, template: "base", vcpu: 4, memoryMib: 256, diskMib: 1024, envVars: {}, allowInternetAccess: true });

    const first = await sub.place(req("a".repeat(20)), signal());
    assert.equal(first.nodeId, A, "equal nodes: the lower id");
    await sub.start(first, spec("a".repeat(20)), signal());
    now = 10; // the snapshot (read at 0) shows A empty: the start came after its read
    assert.equal((await sub.decide(req("b".repeat(20)), signal())).nodeId, B, "A's start counts until a newer snapshot");

    // A heartbeat publishes A's sandbox; a snapshot read after the start shows it, and the count goes.
    rows.used.set(A, 4);
    now = 2500;
    assert.equal((await sub.decide(req("b".repeat(20)), signal())).nodeId, B, "the rows show A full");
    rows.used.set(B, 4);
    now = 2600; // within the age of the read at 2500: B still looks empty in the snapshot
    const second = await sub.place(req("b".repeat(20)), signal());
    assert.equal(second.nodeId, B, "B still has room in the snapshot; nothing else counts against it");
    // Both full on fresh rows too: the refusal names capacity.
    await assert.rejects(
      () => sub.decide(req("c".repeat(20)), signal()),
      (e: unknown) => e instanceof SpaceError && e.code === "resource_exhausted",
    );
    // A kill frees A: the next create is admitted at once, on fresh rows, though the snapshot says full.
    rows.used.set(A, 0);
    const readsBefore = rows.reads;
    assert.equal((await sub.decide(req("c".repeat(20)), signal())).nodeId, A);
    assert.equal(rows.reads, readsBefore + 1, "the snapshot refused; one fresh read admitted");
  } finally {
    await Promise.all(nodes.map((n) => n.close()));
  }
});

test("direct placement on a snapshot: a drain or fence since the read is obeyed at once (the chosen node's row is read fresh)", async () => {
  const rows = new Rows();
  let now = 0;
  const dir = new CachedNodeDirectory(rows, 1000, () => now);
  const sub = new DirectSubstrate({ nodes: dir, internalToken: "tok" });
  const req = (sandboxId: string, pin?: string) => ({ sandboxId, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024, ...(pin ? { pinnedNodeId: pin } : {}) });
  assert.equal((await sub.decide(req("a".repeat(20)), signal())).nodeId, A, "equal nodes: the lower id");
  const reads = rows.reads;

  rows.status.set(A, "draining");
  now = 10; // the snapshot still shows A ready
  assert.equal((await sub.decide(req("b".repeat(20)), signal())).nodeId, B, "A was drained after the snapshot: avoided");
  assert.equal(rows.reads, reads + 1, "one fresh read of every row, after the chosen row said otherwise");

  rows.status.set(A, "ready");
  rows.status.set(B, "fenced");
  now = 20;
  assert.equal((await sub.decide(req("c".repeat(20)), signal())).nodeId, A);
  // A restore pinned to a node drained since the snapshot is refused (it waits for its publication).
  rows.status.set(A, "draining");
  now = 30;
  await assert.rejects(
    () => sub.decide(req("d".repeat(20), A), signal()),
    (e: unknown) => e instanceof SpaceError && /draining/.test(e.message),
  );
});

test("volume placement on a snapshot: a node readied or drained since the read decides (a forced drain right after a ready)", async () => {
  const rows = new Rows();
  let now = 0;
  const dir = new CachedNodeDirectory(rows, 1000, () => now);
  const sub = new DirectSubstrate({ nodes: dir, internalToken: "tok" });
  rows.status.set(B, "draining");
  assert.equal(await sub.placeVolume(64, {}, signal()), A, "the only ready node");
  // B readied, then A's volumes evacuated at once: the snapshot still shows B draining.
  rows.status.set(B, "ready");
  now = 10;
  assert.equal(await sub.placeVolume(64, { exclude: [A] }, signal()), B, "B, from the fresh rows");
  // And the other way: the snapshot's choice was drained since.
  rows.status.set(B, "draining");
  now = 20;
  assert.equal(await sub.placeVolume(64, {}, signal()), A);
  rows.status.set(A, "fenced");
  now = 30;
  await assert.rejects(
    () => sub.placeVolume(64, {}, signal()),
    (e: unknown) => e instanceof SpaceError && e.code === "resource_exhausted" && /no ready node to hold a 64 MiB volume/.test(e.message),
  );
});

test("ledger placement: a held read that began before another create's reservation still counts that create's claim (concurrent creates spread)", async () => {
  const rows = new Rows();
  const reserved = new Map<string, NodeHeld>();
  /** The second held read is answered late, with what the store held when it began (nothing). */
  let reads = 0;
  let lateRead: (() => void) | undefined;
  const ledger: CapacityLedger = {
    async held() {
      reads++;
      const at = performance.now();
      const snapshot = new Map(reserved);
      if (reads === 2) await new Promise<void>((r) => (lateRead = r));
      return { at, value: snapshot };
    },
    async reserve(_id, candidates) {
      const nodeId = candidates[0]!;
      const h = reserved.get(nodeId) ?? { slots: 0, vcpu: 0, disk: 0 };
      reserved.set(nodeId, { slots: h.slots + 1, vcpu: h.vcpu + 1, disk: h.disk + 1 });
      return { nodeId };
    },
  };
  const sub = new DirectSubstrate({ nodes: rows, internalToken: "tok", ledger });
  const req = (sandboxId: string) => ({ sandboxId, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024 });
  const first = sub.place(req("a".repeat(20)), signal());
  const second = sub.place(req("b".repeat(20)), signal());
  assert.equal((await first).nodeId, A, "equal nodes: the lower id");
  // The first reservation is made and its claim released; only now does the second read answer.
  while (!lateRead) await new Promise((r) => setImmediate(r));
  lateRead();
  assert.equal((await second).nodeId, B, "the second create saw the first's claim, though its read predates the reservation");
});

test("believed ledger: one held read per age for every create; a refusal on the belief is decided again on a fresh read (a kill's room is used at once)", async () => {
  const rows = new Rows();
  const held = new Map<string, NodeHeld>();
  let heldReads = 0;
  const inner: CapacityLedger = {
    async held() {
      heldReads++;
      return { at: now, value: new Map(held) };
    },
    // The store's check under the node's lock: what it holds now.
    async reserve(_id, candidates, admit) {
      const rejected: Partial<Record<RejectReason, string[]>> = {};
      for (const nodeId of candidates) {
        const h = held.get(nodeId) ?? { slots: 0, vcpu: 0, disk: 0 };
        const verdict = admit({ capacity: rows.entry(nodeId).capacity ?? null, measured: {} }, h);
        if (verdict !== true) {
          (rejected[verdict] ??= []).push(nodeId);
          continue;
        }
        held.set(nodeId, { slots: h.slots + 1, vcpu: h.vcpu + 1, disk: h.disk + 1 });
        return { nodeId };
      }
      return { rejected };
    },
  };
  let now = 0;
  const sub = new DirectSubstrate({
    nodes: new CachedNodeDirectory(rows, 1000, () => now),
    internalToken: "tok",
    ledger: believedCapacityLedger(inner, 1000, () => now),
  });
  const req = (sandboxId: string) => ({ sandboxId, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024 });

  const placed = [];
  for (const c of "abcd") placed.push((await sub.place(req(c.repeat(20)), signal())).nodeId);
  assert.equal(heldReads, 1, "four creates within the age: one read of what the store holds");
  assert.deepEqual(placed, [A, B, A, B], "each create still counts this replica's placements since the read");

  // Both nodes fill (every network slot held); the belief still says so after a kill frees A.
  held.set(A, { slots: 100, vcpu: 100, disk: 100 });
  held.set(B, { slots: 100, vcpu: 100, disk: 100 });
  now = 2500;
  await assert.rejects(
    () => sub.place(req("e".repeat(20)), signal()),
    (e: unknown) => e instanceof SpaceError && e.code === "resource_exhausted",
  );
  held.set(A, { slots: 99, vcpu: 99, disk: 99 });
  now = 2600; // within the age of the read that saw both full
  const reads = heldReads;
  assert.equal((await sub.place(req("f".repeat(20)), signal())).nodeId, A, "admitted at once");
  assert.equal(heldReads, reads + 1, "the belief refused; one fresh read admitted");
});

test("ledger placement on a snapshot: when every candidate tried refuses under its lock (drained since), placement decides again on fresh reads", async () => {
  const rows = new Rows();
  const tried: string[][] = [];
  const ledger: CapacityLedger = {
    async held() {
      return { at: now, value: new Map() };
    },
    // The store's check under the node's lock: its row's status now.
    async reserve(_id, candidates) {
      tried.push([...candidates]);
      const nodeId = candidates.find((c) => rows.status.get(c) === undefined);
      return nodeId ? { nodeId } : { rejected: { unavailable: [...candidates] } };
    },
  };
  let now = 0;
  const sub = new DirectSubstrate({ nodes: new CachedNodeDirectory(rows, 1000, () => now), internalToken: "tok", ledger: believedCapacityLedger(ledger, 1000, () => now) });
  const req = (sandboxId: string) => ({ sandboxId, templateId: "base", vcpu: 1, memoryMib: 256, diskMib: 1024 });
  assert.equal((await sub.place(req("a".repeat(20)), signal())).nodeId, A);
  // Since that read: A and B drained, C registered.
  rows.status.set(A, "draining");
  rows.status.set(B, "draining");
  rows.ids = [A, B, C];
  now = 10;
  const readsBefore = rows.reads;
  tried.length = 0;
  assert.equal((await sub.place(req("b".repeat(20)), signal())).nodeId, C);
  // B first: the first create's claim still counts against A on this snapshot.
  assert.deepEqual(tried, [[B, A], [C]], "the snapshot's candidates refused under their locks; the fresh read offered C");
  assert.equal(rows.reads, readsBefore + 1, "one fresh read of the directory");
});
