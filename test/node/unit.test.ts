// Pure logic of the node and runtime (no root): table-driven.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildOciSpec, sandboxCapabilities } from "../../src/runtime/oci/spec.ts";
import { deniedSyscalls } from "../../src/runtime/oci/seccomp.ts";
import { classifyBtrfsError, parseQgroupShow, parseSendIdentity, parseReceivedSubvolumes } from "../../src/node/disk/btrfs.ts";
import { parseSlotRange } from "../../src/core/cidr.ts";
import { mirrorsFromDeb822, mirrorsFromList, pickDebianMirror } from "../../src/node/templates/debian-mirror.ts";
import { environmentDigest, environmentLabel } from "../../src/contract/execution-environment.ts";
import { CleanupStack } from "../../src/node/sandboxes/cleanup-stack.ts";
import { canTransition } from "../../src/node/sandboxes/states.ts";
import type { RunSpec } from "../../src/runtime/runtime.ts";

const run: RunSpec = {
  id: "abcdefghij0123456789",
  rootfs: "/cache/roots/abcdefghij0123456789",
  hostname: "abcdefghij0123456789",
  args: ["/opt/space/bin/node", "/opt/space/envd/envd.mjs", "--port", "49983"],
  env: { A: "1" },
  cwd: "/",
  mounts: [{ source: "/usr/bin/node", destination: "/opt/space/bin/node", readonly: true }],
  netnsPath: "/run/netns/abcdefghij0123456789",
  resources: { vcpu: 2, memoryMib: 512, pidsLimit: 1024 },
  logPath: "/tmp/x.log",
};

describe("OCI spec", () => {
  const spec = buildOciSpec(run, { cgroupsPath: "space/abcdefghij0123456789" }) as {
    process: { capabilities: { bounding: string[] }; noNewPrivileges: boolean; env: string[] };
    hostname: string;
    linux: { namespaces: { type: string; path?: string }[]; resources: { cpu: { quota: number; period: number }; memory: { limit: number }; pids: { limit: number } }; maskedPaths: string[]; readonlyPaths: string[]; seccomp: { defaultAction: string; syscalls: { names: string[] }[] } };
    mounts: { destination: string; options: string[] }[];
  };
  it("joins the slot's netns and unshares pid, mount, ipc, uts, cgroup", () => {
    const ns = Object.fromEntries(spec.linux.namespaces.map((n) => [n.type, n.path ?? ""]));
    assert.deepEqual(Object.keys(ns).sort(), ["cgroup", "ipc", "mount", "network", "pid", "uts"]);
    assert.equal(ns.network, run.netnsPath);
  });
  it("maps vcpu, memory and pids to cgroup limits", () => {
    assert.equal(spec.linux.resources.cpu.quota / spec.linux.resources.cpu.period, 2);
    assert.equal(spec.linux.resources.memory.limit, 512 * 1024 * 1024);
    assert.equal(spec.linux.resources.pids.limit, 1024);
  });
  it("drops dangerous capabilities", () => {
    for (const c of ["CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_SYS_MODULE", "CAP_SYS_PTRACE", "CAP_NET_ADMIN", "CAP_MKNOD", "CAP_SYS_RESOURCE"]) {
      assert.ok(!spec.process.capabilities.bounding.includes(c), c);
    }
    assert.deepEqual(spec.process.capabilities.bounding, [...sandboxCapabilities]);
  });
  it("masks and write-protects /proc paths, sets the hostname, binds read-only", () => {
    assert.ok(spec.linux.maskedPaths.includes("/proc/kcore"));
    assert.ok(spec.linux.readonlyPaths.includes("/proc/sys"));
    assert.equal(spec.hostname, run.id);
    const node = spec.mounts.find((m) => m.destination === "/opt/space/bin/node")!;
    assert.ok(node.options.includes("ro"));
    assert.deepEqual(spec.process.env, ["A=1"]);
  });
  it("denies mount, module and kexec syscalls by seccomp", () => {
    assert.equal(spec.linux.seccomp.defaultAction, "SCMP_ACT_ALLOW");
    const denied = new Set(spec.linux.seccomp.syscalls.flatMap((r) => r.names));
    for (const s of ["mount", "umount2", "init_module", "finit_module", "delete_module", "kexec_load", "bpf", "perf_event_open", "unshare", "open_by_handle_at"]) assert.ok(denied.has(s), s);
    assert.equal(new Set(deniedSyscalls).size, deniedSyscalls.length);
  });
  it("hands out no memory protection keys (CRIU does not restore them): pkey_alloc fails as on a CPU without PKU", () => {
    const rules = spec.linux.seccomp.syscalls as { names: string[]; action?: string; errnoRet?: number }[];
    const rule = rules.find((r) => r.names.includes("pkey_alloc"));
    assert.deepEqual(rule && { action: rule.action, errnoRet: rule.errnoRet }, { action: "SCMP_ACT_ERRNO", errnoRet: 28 /* ENOSPC */ });
  });
});

describe("btrfs adapter", () => {
  it("classifies stderr", () => {
    const cases: [string, string][] = [
      ["ERROR: cannot snapshot: No space left on device", "resource_exhausted"],
      ["ERROR: Could not statfs: No such file or directory", "not_found"],
      ["ERROR: target path already exists: File exists", "already_exists"],
      ["ERROR: not a btrfs filesystem: /x", "failed_precondition"],
      ["ERROR: something else", "internal"],
    ];
    for (const [stderr, code] of cases) assert.equal(classifyBtrfsError(stderr, "op").code, code, stderr);
  });
  it("parses qgroup show", () => {
    const out = "qgroupid         rfer         excl     max_rfer \n--------         ----         ----     -------- \n0/258       323092480        16384    1073741824 \n";
    assert.deepEqual(parseQgroupShow(out), { referencedBytes: 323092480, exclusiveBytes: 16384, limitBytes: 1073741824 });
    assert.equal(parseQgroupShow("0/259 100 10 none")?.limitBytes, null);
    assert.equal(parseQgroupShow("nothing"), undefined);
  });
  it("parses a subvolume's send identity", () => {
    const show = (received: string) => `templates/base\n\tName: \t\t\tbase\n\tUUID: \t\t\t5d1c0f6e-aaaa-4b4b-8c8c-000000000001\n\tParent UUID: \t\t-\n\tReceived UUID: \t\t${received}\n`;
    assert.equal(parseSendIdentity(show("-")), "5d1c0f6e-aaaa-4b4b-8c8c-000000000001");
    assert.equal(parseSendIdentity(show("9e0a7b1c-bbbb-4c4c-8d8d-000000000002")), "9e0a7b1c-bbbb-4c4c-8d8d-000000000002");
    assert.equal(parseSendIdentity("nothing"), undefined);
  });
  it("parses the received subvolumes of subvolume list -u -R", () => {
    const out = "ID 256 gen 9 top level 5 received_uuid -                                    uuid 5d1c0f6e-aaaa-4b4b-8c8c-000000000001 path templates/base\n" +
      "ID 260 gen 12 top level 5 received_uuid 9e0a7b1c-bbbb-4c4c-8d8d-000000000002 uuid 11111111-cccc-4d4d-8e8e-000000000003 path snapshots/parents/9e0a/base\n";
    assert.deepEqual(parseReceivedSubvolumes(out), [
      { receivedUuid: "9e0a7b1c-bbbb-4c4c-8d8d-000000000002", uuid: "11111111-cccc-4d4d-8e8e-000000000003", path: "snapshots/parents/9e0a/base" },
    ]);
    assert.deepEqual(parseReceivedSubvolumes(""), []);
  });
});

describe("slot range", () => {
  it("hands out addresses after the gateway and never the broadcast", () => {
    const r = parseSlotRange("10.200.0.0/16");
    assert.equal(r.gateway, "10.200.0.1");
    assert.equal(r.address(0), "10.200.0.2");
    assert.equal(r.address(300), "10.200.1.46");
    assert.equal(r.size, 65533);
    assert.throws(() => r.address(65533));
    assert.equal(parseSlotRange("10.200.128.7/17").network, "10.200.128.0");
  });
});

describe("Debian mirror from apt sources", () => {
  it("reads deb822 and one-line sources, main archive only", () => {
    const deb822 = "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\nTypes: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n";
    assert.equal(pickDebianMirror(mirrorsFromDeb822(deb822)), "http://mirror.example/debian");
    const list = "# comment\ndeb [arch=amd64] http://m.example/debian bookworm main\ndeb-src http://x/debian bookworm main\n";
    assert.deepEqual(mirrorsFromList(list), ["http://m.example/debian"]);
    assert.equal(pickDebianMirror(["https://deb.nodesource.com/node_20.x"]), undefined);
  });
});

describe("execution environment", () => {
  it("digests the tuple (order of CPU features does not matter) and labels it", () => {
    const e = { runtimeKind: "runc", runtimeVersion: "1.1.5", rootfsFormat: "btrfs-subvolume" as const, cpuFeatures: ["sse2", "avx"] };
    const d = environmentDigest(e);
    assert.match(d, /^sha256:[0-9a-f]{64}$/);
    assert.equal(environmentDigest({ ...e, cpuFeatures: ["avx", "sse2"] }), d);
    assert.notEqual(environmentDigest({ ...e, runtimeKind: "crun" }), d);
    assert.equal(environmentLabel(d), `space.dev/env-sha256-${d.slice(7, 19)}`);
  });
});

describe("cleanup stack and states", () => {
  it("runs LIFO once, aggregates errors, and moves ownership", async () => {
    const order: string[] = [];
    const s = new CleanupStack();
    s.defer("a", () => void order.push("a"));
    s.defer("b", () => {
      order.push("b");
      throw new Error("b failed");
    });
    s.defer("c", () => void order.push("c"));
    await assert.rejects(s.run(), /b failed/);
    assert.deepEqual(order, ["c", "b", "a"]);
    await s.run(); // once
    assert.equal(order.length, 3);
    const t = new CleanupStack();
    t.defer("x", () => void order.push("x"));
    const moved = t.move();
    await t.run();
    assert.equal(order.length, 3);
    await moved.run();
    assert.equal(order.at(-1), "x");
  });
  it("allows only table transitions", () => {
    assert.ok(canTransition("running", "paused"));
    assert.ok(canTransition("stopped", "starting"));
    assert.ok(!canTransition("stopped", "paused"));
    assert.ok(!canTransition("killing", "running"));
  });
});
