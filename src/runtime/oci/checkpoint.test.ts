import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { cgroupYard } from "./checkpoint.ts";

const hybrid = {
  cgroup: "10:hugetlb:/\n9:name=systemd:/\n8:pids:/\n4:memory:/process_api/c4\n1:cpu,cpuacct:/\n0::/\n",
  mountinfo: [
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct",
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd",
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
    "45 31 0:40 / /sys/fs/cgroup/hugetlb rw,relatime - cgroup cgroup rw,hugetlb",
  ].join("\n"),
};

describe("CRIU's cgroup yard", () => {
  it("is /sys/fs/cgroup on a host with every hierarchy of ours mounted there under CRIU's names", () => {
    assert.equal(cgroupYard(hybrid.cgroup, hybrid.mountinfo), "/sys/fs/cgroup");
  });

  it("is none when a hierarchy is not mounted there (CRIU mounts them itself)", () => {
    const noHugetlb = hybrid.mountinfo.split("\n").filter((l) => !l.includes("hugetlb")).join("\n");
    assert.equal(cgroupYard(hybrid.cgroup, noHugetlb), undefined);
    assert.equal(cgroupYard(`${hybrid.cgroup}11:rdma:/\n`, hybrid.mountinfo), undefined);
  });

  it("is none on a cgroup v2-only host (one hierarchy, /sys/fs/cgroup is it) or without /proc", () => {
    assert.equal(cgroupYard("0::/user.slice\n", "25 1 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw"), undefined);
    assert.equal(cgroupYard("", ""), undefined);
  });
});
