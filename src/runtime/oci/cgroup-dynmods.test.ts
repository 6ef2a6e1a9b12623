import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { cgroup2Mount, remountOptions } from "./cgroup-dynmods.ts";

const hybrid = [
  "31 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
  "32 31 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu",
  "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
].join("\n");
const systemdV2 = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot";

describe("cgroup2 favordynmods remount", () => {
  it("finds the cgroup2 mount of a hybrid host (not the v1 hierarchies or the tmpfs)", () => {
    assert.deepEqual(cgroup2Mount(hybrid), { target: "/sys/fs/cgroup/unified", superOptions: ["rw"] });
  });

  it("finds it past optional fields, and none on a v1-only host", () => {
    assert.deepEqual(cgroup2Mount(systemdV2), { target: "/sys/fs/cgroup", superOptions: ["rw", "nsdelegate", "memory_recursiveprot"] });
    assert.equal(cgroup2Mount(hybrid.split("\n").slice(0, 2).join("\n")), undefined);
    assert.equal(cgroup2Mount(""), undefined);
  });

  it("keeps the superblock's options (a cgroup2 remount clears any it is not given) and adds favordynmods", () => {
    assert.equal(remountOptions(cgroup2Mount(systemdV2)!), "remount,nsdelegate,memory_recursiveprot,favordynmods");
    assert.equal(remountOptions(cgroup2Mount(hybrid)!), "remount,favordynmods");
  });
});
