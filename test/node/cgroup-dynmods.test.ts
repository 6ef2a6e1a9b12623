/**
 * The node's start sets favordynmods on the host's cgroup2 hierarchy (fast cgroup
 * migrations, runtime/oci/cgroup-dynmods.ts), keeping its other options.
 *
 * The flag is never cleared here: on Linux 6.18 a remount without it leaves the kernel half
 * switched (the per-threadgroup lock mode stays while the rcu_sync state is exited; a kernel
 * fix of that disable path came later). So on a host where it is already set these tests
 * check what stays true: the call finds it set, and a node's start leaves it set with the
 * mount's other options. The "set" path itself is covered by the unit tests of the remount's
 * options (src/runtime/oci/cgroup-dynmods.test.ts).
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { createLogger } from "../../src/core/log.ts";
import { cgroup2Mount, favorCgroupMigrations } from "../../src/runtime/oci/cgroup-dynmods.ts";
import { startTestNode } from "./helpers.ts";

const isRoot = process.getuid?.() === 0;
const mount = async () => cgroup2Mount(await readFile("/proc/self/mountinfo", "utf8"));

describe("cgroup2 favordynmods", { skip: isRoot ? false : "root needed (remounts the host's cgroup2)" }, () => {
  it("after a node's start the flag is set and the mount keeps its other options; a second call finds it set", async () => {
    const before = await mount();
    assert.ok(before, "this host has a cgroup2 mount");
    const node = await startTestNode();
    await node.close();
    const after = await mount();
    assert.ok(after?.superOptions.includes("favordynmods"), after?.superOptions.join(","));
    for (const o of before.superOptions) assert.ok(after?.superOptions.includes(o), `option ${o} kept`);
    assert.equal(await favorCgroupMigrations(createLogger("silent", "test")), "already");
  });
});
