/**
 * The node's start remounts the host's cgroup2 hierarchy with favordynmods (fast cgroup
 * migrations, runtime/oci/cgroup-dynmods.ts), keeping its other options. Each test first
 * clears the flag (a remount with the superblock's options but not it) and sets it again at
 * once: Linux 6.18 cannot fully turn the option off (its per-threadgroup lock mode stays), and
 * a kernel fix of that disable path came later, so the flag is never left off for long.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { createLogger } from "../../src/core/log.ts";
import { cgroup2Mount, favorCgroupMigrations } from "../../src/runtime/oci/cgroup-dynmods.ts";
import { startTestNode } from "./helpers.ts";

const isRoot = process.getuid?.() === 0;
const mount = async () => cgroup2Mount(await readFile("/proc/self/mountinfo", "utf8"));

async function clearFlag(): Promise<string[]> {
  const m = await mount();
  assert.ok(m, "this host has a cgroup2 mount");
  const keep = m.superOptions.filter((o) => o !== "favordynmods" && o !== "rw" && o !== "ro");
  // --options-source=disable: mount(8) would otherwise merge the mount's current options back in.
  await exec("mount", ["--options-source=disable", "-o", ["remount", ...keep].join(","), m.target]);
  const after = await mount();
  assert.equal(after?.superOptions.includes("favordynmods"), false);
  return after!.superOptions;
}

describe("cgroup2 favordynmods", { skip: isRoot ? false : "root needed (remounts the host's cgroup2)" }, () => {
  it("set once, with the mount's other options kept; a second call finds it set", async () => {
    const before = await clearFlag();
    const log = createLogger("silent", "test");
    assert.equal(await favorCgroupMigrations(log), "set");
    const m = await mount();
    assert.ok(m?.superOptions.includes("favordynmods"));
    for (const o of before) assert.ok(m?.superOptions.includes(o), `option ${o} kept`);
    assert.equal(await favorCgroupMigrations(log), "already");
  });

  it("a node's start sets it", async () => {
    await clearFlag();
    const node = await startTestNode();
    await node.close();
    assert.equal((await mount())?.superOptions.includes("favordynmods"), true);
  });
});
