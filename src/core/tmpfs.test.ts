// ensureTmpfs: an empty dir (or one holding only regenerated files) gets a tmpfs of its own,
// one holding anything else stays on its disk untouched, a tmpfs is never mounted twice.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { exec } from "./exec.ts";
import { ensureTmpfs, isTmpfs } from "./tmpfs.ts";

const isRoot = process.getuid?.() === 0;
const mountsAt = async (dir: string) => (await readFile("/proc/self/mounts", "utf8")).split("\n").filter((l) => l.split(" ")[1] === dir).length;

describe("ensureTmpfs", { skip: !isRoot && "needs root (mount)" }, () => {
  let root = "";
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "space-tmpfs-"));
  });
  after(async () => {
    for (const d of ["fresh", "regenerated", "held"]) await exec("umount", [join(root, d)], { allowFailure: true });
    await rm(root, { recursive: true, force: true });
  });

  it("mounts a tmpfs on a missing dir, once", async () => {
    const dir = join(root, "fresh");
    assert.equal(await isTmpfs(root), false, "the test needs a dir off tmpfs");
    assert.equal(await ensureTmpfs(dir, { name: "space-test", sizeMib: 1 }), true);
    assert.equal(await isTmpfs(dir), true);
    await writeFile(join(dir, "state.json"), "{}");
    assert.equal(await ensureTmpfs(dir, { name: "space-test", sizeMib: 1 }), true);
    assert.equal(await mountsAt(dir), 1);
    assert.equal(await readFile(join(dir, "state.json"), "utf8"), "{}", "a second call keeps what the tmpfs holds");
  });

  it("mounts over a dir that holds only files written anew at each start", async () => {
    const dir = join(root, "regenerated");
    await mkdir(dir);
    await writeFile(join(dir, "criu.conf"), "x");
    assert.equal(await ensureTmpfs(dir, { name: "space-test", sizeMib: 1, regenerated: ["criu.conf"] }), true);
    assert.equal(await isTmpfs(dir), true);
  });

  it("leaves a dir holding files from before on its disk", async () => {
    const dir = join(root, "held");
    await mkdir(dir);
    await writeFile(join(dir, "sbx.json"), "kept");
    assert.equal(await ensureTmpfs(dir, { name: "space-test", sizeMib: 1, regenerated: ["criu.conf"] }), false);
    assert.equal(await isTmpfs(dir), false);
    assert.equal(await readFile(join(dir, "sbx.json"), "utf8"), "kept");
  });
});
