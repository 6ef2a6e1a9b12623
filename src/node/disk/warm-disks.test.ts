import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../core/log.ts";
import { WarmDisks } from "./warm-disks.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(f: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200 && !f(); i++) await sleep(10);
  assert.ok(f(), what);
}

/** Warm disks over plain files: `make` writes the template's current identity into the disk. */
function fixture(dir: string, o: { size?: number; makeMs?: number; templates?: number } = {}) {
  const identities = new Map<string, number>([["base", 1], ["a", 1], ["b", 1]]);
  const made: string[] = [];
  const removed: string[] = [];
  const warm = new WarmDisks({
    size: o.size ?? 2,
    templates: o.templates ?? 8,
    dir,
    quietMs: 20,
    make: async (template, path) => {
      await sleep(o.makeMs ?? 1);
      await writeFile(path, String(identities.get(template)));
      made.push(path);
    },
    identity: async (template) => identities.get(template),
    remove: async (path) => {
      removed.push(path);
      await rm(path, { force: true });
    },
    logger: createLogger("error", "warm-disks-test"),
  });
  return { warm, identities, made, removed };
}

describe("WarmDisks", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "warm-disks-"));
  });
  after(async () => rm(dir, { recursive: true, force: true }));

  it("fills after the first use, once no take came for the quiet window, up to its size", async () => {
    const d = join(dir, "fill");
    await mkdir(d);
    const { warm, made } = fixture(d);
    assert.equal(await warm.take("base"), undefined, "nothing is made before a template is used");
    await until(() => warm.readyCount("base") === 2, "two disks made");
    await sleep(60);
    assert.equal(made.length, 2, "never more than the size");
    const a = await warm.take("base");
    const b = await warm.take("base");
    assert.ok(a && b && a !== b, "each disk is given once");
    await warm.close();
  });

  it("gives each disk to one caller when takes race", async () => {
    const d = join(dir, "race");
    await mkdir(d);
    const { warm } = fixture(d, { size: 3 });
    await warm.take("base");
    await until(() => warm.readyCount("base") === 3, "three disks made");
    const got = (await Promise.all(Array.from({ length: 6 }, () => warm.take("base")))).filter(Boolean);
    assert.equal(got.length, 3);
    assert.equal(new Set(got).size, 3);
    await warm.close();
  });

  it("never gives a disk made of a template that has changed since: it deletes them", async () => {
    const d = join(dir, "stale");
    await mkdir(d);
    const { warm, identities, removed } = fixture(d);
    await warm.take("base");
    await until(() => warm.readyCount("base") === 2, "two disks made");
    const stale = (await readdir(d)).map((n) => join(d, n));
    identities.set("base", 2); // the template was swapped in place
    assert.equal(await warm.take("base"), undefined);
    await until(() => stale.every((p) => removed.includes(p)), "the stale disks deleted");
    await until(() => warm.readyCount("base") === 2, "refilled from the new template");
    const fresh = await warm.take("base");
    assert.ok(fresh && !stale.includes(fresh));
    await warm.close();
  });

  it("waits while takes keep coming (a burst), and stops a fill when one comes", async () => {
    const d = join(dir, "burst");
    await mkdir(d);
    const { warm, made } = fixture(d, { size: 4, makeMs: 15 });
    for (let i = 0; i < 8; i++) {
      await warm.take("base");
      await sleep(5);
    }
    assert.equal(made.length, 0, "no disk made during the burst");
    await until(() => made.length >= 1, "the fill started after the burst");
    await warm.take("base"); // a take mid-fill: the fill stops at its next disk, then starts again later
    await until(() => warm.readyCount("base") === 4, "filled to its size after all");
    await warm.close();
  });

  it("deletes an earlier agent's leftovers before its first fill, and everything at close", async () => {
    const d = join(dir, "sweep");
    await mkdir(d);
    await writeFile(join(d, ".warm-base-leftover"), "old");
    await writeFile(join(d, "a-sandbox-disk"), "kept");
    const { warm } = fixture(d);
    await warm.take("base");
    await until(() => warm.readyCount("base") === 2, "two disks made");
    assert.deepEqual((await readdir(d)).filter((n) => n.includes("leftover")), []);
    await warm.close();
    assert.deepEqual(await readdir(d), ["a-sandbox-disk"]);
  });

  it("keeps disks for the most recently used templates only", async () => {
    const d = join(dir, "recent");
    await mkdir(d);
    const { warm, removed } = fixture(d, { templates: 2 });
    await warm.take("base");
    await warm.take("a");
    await until(() => warm.readyCount("base") === 2 && warm.readyCount("a") === 2, "two templates filled");
    const oldest = (await readdir(d)).filter((n) => n.startsWith(".warm-base-")).map((n) => join(d, n));
    await warm.take("b"); // a third template: the least recently used (base) loses its disks
    await until(() => warm.readyCount("b") === 2, "the new one filled");
    await until(() => oldest.every((p) => removed.includes(p)), "base's disks deleted");
    assert.equal(warm.readyCount("base"), 0);
    assert.deepEqual([...warm.ready()].sort(), [["a", 2], ["b", 2]]);
    await sleep(60);
    assert.equal(warm.readyCount("base"), 0, "and not made again");
    await warm.close();
  });

  it("a drop while a disk is being made deletes that disk too, and makes no more until the next use", async () => {
    const d = join(dir, "drop");
    await mkdir(d);
    const { warm, made } = fixture(d, { makeMs: 80 });
    await warm.take("base");
    await sleep(40); // the fill has started its first disk (quiet window 20 ms, a make 80 ms)
    warm.drop("base"); // the source is dropped (a checkpoint deleted) mid-make
    await sleep(200);
    assert.equal(warm.readyCount("base"), 0, "the disk that was under way is not kept");
    assert.deepEqual(await readdir(d), [], "nor left on disk");
    assert.ok(made.length <= 1, `no more were made after the drop (made ${made.length})`);
    await warm.close();
  });

  it("size 0 makes nothing", async () => {
    const d = join(dir, "off");
    await mkdir(d);
    const { warm, made } = fixture(d, { size: 0 });
    assert.equal(await warm.take("base"), undefined);
    await sleep(60);
    assert.equal(made.length, 0);
    await warm.close();
  });
});
