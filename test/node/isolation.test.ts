// Isolation, proven from inside real sandboxes (root; runc; btrfs; netns).
import assert from "node:assert/strict";
import { readFile, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { after, before, describe, it } from "node:test";
import { exec } from "../../src/core/exec.ts";
import { isRoot, sh, spec, startTestNode, waitFor, type TestNode } from "./helpers.ts";

const skip = isRoot ? false : "needs root (runc, btrfs, netns)";

describe("sandbox isolation", { skip, timeout: 300_000 }, () => {
  let node: TestNode;
  const a = spec({ memoryMib: 512 });
  const b = spec();
  let addrA = "";
  const servers: Server[] = [];
  const signal = () => AbortSignal.timeout(120_000);

  before(async () => {
    // The real envd: as init it reaps orphans (the stub does not, and zombies hold pids).
    node = await startTestNode({ realEnvd: true });
    addrA = (await node.agent.manager!.create(a, signal())).address;
    await node.agent.manager!.create(b, signal());
  });
  after(async () => {
    for (const s of servers) s.close();
    await node?.close();
  });

  it("runs envd as init, hostname = sandbox id, user `user` with working sudo", async () => {
    const r = await sh(node, a.sandboxId, "cat /proc/1/cmdline | tr '\\0' ' '; echo; hostname; id -un; sudo -n id -u; echo $HOME");
    assert.equal(r.exitCode, 0, r.stderr);
    const [cmd, host, user, sudoUid, home] = r.stdout.trim().split("\n");
    // From the bundle's V8 startup snapshot, which `npm run build:envd` builds with this Node.js;
    // no memory reducer (envd-launch.ts: its full GCs on every idle envd).
    assert.match(cmd!, /^\/opt\/space\/bin\/node --no-memory-reducer --snapshot-blob \/opt\/space\/envd\/envd\.blob -- --port 49983 $/);
    assert.equal(host, a.sandboxId);
    assert.equal(user, "user");
    assert.equal(sudoUid, "0");
    assert.equal(home, "/home/user");
  });

  it("cannot see host processes nor another sandbox's processes", async () => {
    await sh(node, a.sandboxId, "nohup sleep 3001 >/dev/null 2>&1 &");
    const inB = await sh(node, b.sandboxId, "ps -eo args");
    assert.equal(inB.exitCode, 0, inB.stderr);
    assert.doesNotMatch(inB.stdout, /sleep 3001/);
    assert.doesNotMatch(inB.stdout, /--import tsx|--test/); // this test process, on the host
    const pids = inB.stdout.trim().split("\n").length - 1;
    assert.ok(pids < 10, `sandbox sees ${pids} processes`);
    const hostNs = (await exec("readlink", ["/proc/self/ns/pid"])).stdout.trim();
    const inNs = (await sh(node, b.sandboxId, "readlink /proc/self/ns/pid")).stdout.trim();
    assert.notEqual(inNs, hostNs);
  });

  it("cannot see another sandbox's files", async () => {
    assert.equal((await sh(node, a.sandboxId, "echo secret > /home/user/secret.txt")).exitCode, 0);
    const r = await sh(node, b.sandboxId, "cat /home/user/secret.txt; find / -xdev -name secret.txt 2>/dev/null | wc -l");
    assert.doesNotMatch(r.stdout, /secret\n/);
    assert.equal(r.stdout.trim().split("\n").pop(), "0");
  });

  it("cannot reach another sandbox over the network (the node can)", async () => {
    await sh(node, a.sandboxId, "nohup python3 -m http.server 8080 --bind 0.0.0.0 >/dev/null 2>&1 &");
    const fromHost = await waitCurl(`http://${addrA}:8080/`);
    assert.equal(fromHost, "200", "the node reaches the sandbox");
    const r = await sh(node, b.sandboxId, `curl -s -o /dev/null -w '%{http_code}' -m 2 http://${addrA}:8080/`);
    assert.notEqual(r.stdout.trim(), "200");
    assert.notEqual(r.exitCode, 0);
  });

  it("cannot reach the node's loopback or own addresses, nor link-local metadata", async () => {
    const port = 39000 + Math.floor(Math.random() * 1000);
    const hostAddrs = ["127.0.0.1", node.agent.slots!.range.gateway];
    const eth0 = (await exec("ip", ["-4", "-br", "addr", "show", "eth0"], { allowFailure: true })).stdout.split(/\s+/)[2]?.split("/")[0];
    if (eth0) hostAddrs.push(eth0);
    for (const h of hostAddrs) {
      const srv = createServer((_q, s) => s.end("host")).listen(port, h);
      servers.push(srv);
    }
    await new Promise((r) => setTimeout(r, 50));
    for (const h of hostAddrs) {
      const r = await sh(node, a.sandboxId, `curl -s -m 2 http://${h}:${port}/`);
      assert.notEqual(r.stdout, "host", `sandbox reached the node at ${h}:${port}`);
    }
    const md = await sh(node, a.sandboxId, "curl -s -m 2 -o /dev/null -w '%{http_code}' http://169.254.169.254/");
    assert.notEqual(md.exitCode, 0);
    const ruleset = (await exec("nft", ["list", "table", "inet", node.agent.slots!.table])).stdout;
    // One rule refuses every metadata range, alone or as a set (`ip daddr { …, 169.254.0.0/16 } reject`).
    assert.match(ruleset, /ip daddr (\{[^}\n]*\b)?169\.254\.0\.0\/16( [^}\n]*\})?( meta l4proto tcp)? (drop|reject)/);
  });

  it("stops a fork bomb at the pids limit and survives it", async () => {
    // Cheap processes (sleep) so the pids limit, not memory, is what stops it.
    const r = await sh(node, a.sandboxId, "i=0; while [ $i -lt 3000 ]; do sleep 1000 >/dev/null 2>&1 & i=$((i+1)); done; echo done", "user", 120_000);
    assert.match(r.stderr, /Cannot fork|Resource temporarily unavailable/, r.stderr.slice(0, 500));
    assert.doesNotMatch(r.stdout, /done/);
    // The sandbox is saturated (even `runc exec` cannot start a thread): read the cgroup from the host.
    const pidsDir = node.agent.runtime!.cgroupDirs(a.sandboxId).pids!;
    const current = Number((await readFile(`${pidsDir}/pids.current`, "utf8")).trim());
    assert.ok(current > 100 && current <= 1024, `pids in the sandbox: ${current}`);
    assert.equal((await readFile(`${pidsDir}/pids.max`, "utf8")).trim(), "1024");
    // Let the clean-up in, then put the limit back.
    await writeFile(`${pidsDir}/pids.max`, "4096");
    await sh(node, a.sandboxId, "pkill -9 -u user sleep", "root");
    await waitFor(async () => Number((await readFile(`${pidsDir}/pids.current`, "utf8")).trim()) < 50, 20_000, "orphans reaped by envd");
    await writeFile(`${pidsDir}/pids.max`, "1024");
    assert.equal((await sh(node, a.sandboxId, "echo alive")).stdout.trim(), "alive");
  });

  it("OOM-kills a memory hog inside its own cgroup only", async () => {
    const r = await sh(node, b.sandboxId, `python3 -c "a=[]\nwhile True: a.append(bytearray(16*1024*1024))"`, "user", 60_000);
    assert.equal(r.exitCode, 137, `exit ${r.exitCode} ${r.stderr}`);
    const oom = await exec("cat", [`${node.agent.runtime!.cgroupDirs(b.sandboxId).memory}/memory.oom_control`]);
    assert.match(oom.stdout, /oom_kill [1-9]/);
    // envd (init) survives, and so does the other sandbox.
    assert.equal((await sh(node, b.sandboxId, "cat /proc/1/cmdline | grep -c envd")).stdout.trim(), "1");
    assert.equal((await sh(node, a.sandboxId, "echo alive")).stdout.trim(), "alive");
  });

  it("refuses mount, user namespaces, raw sockets and module loading, even to root", async () => {
    const m = await sh(node, a.sandboxId, "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x", "root");
    assert.notEqual(m.exitCode, 0);
    const u = await sh(node, a.sandboxId, "unshare -Ur true", "root");
    assert.notEqual(u.exitCode, 0);
    const raw = await sh(node, a.sandboxId, `python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"`, "root");
    assert.notEqual(raw.exitCode, 0);
    assert.match(raw.stderr, /Operation not permitted/);
    const mod = await sh(node, a.sandboxId, `python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(313, 0, b'', 0); print(r, ctypes.get_errno())"`, "root");
    assert.equal(mod.stdout.trim(), "-1 1", mod.stderr); // finit_module → EPERM
    const kcore = await sh(node, a.sandboxId, "cat /proc/kcore 2>/dev/null | wc -c", "root");
    assert.equal(kcore.stdout.trim(), "0"); // masked
    const sys = await sh(node, a.sandboxId, "echo 1 > /proc/sys/net/ipv4/ip_forward", "root");
    assert.notEqual(sys.exitCode, 0); // read-only
  });

  it("fails writes past disk_mib inside the sandbox (qgroup)", async () => {
    const rootfs = (await node.agent.disks!.templateInfo("base"))!.rootfsSizeMib;
    const small = spec({ diskMib: rootfs + 64 });
    await node.agent.manager!.create(small, signal());
    try {
      const r = await sh(node, small.sandboxId, "dd if=/dev/zero of=/home/user/big bs=1M count=256 conv=fsync 2>&1; echo rc=$?", "user", 120_000);
      assert.match(r.stdout, /Disk quota exceeded|No space left/, r.stdout);
      assert.doesNotMatch(r.stdout, /rc=0/);
    } finally {
      await node.agent.manager!.kill(small.sandboxId, signal());
    }
  });

  it("refuses a disk_mib below the template's rootfs at once, naming both sizes", async () => {
    const t0 = Date.now();
    const res = await node.agent.app.inject({
      method: "POST",
      url: "/v1/sandboxes",
      headers: { authorization: "Bearer test-token" },
      payload: spec({ diskMib: 300 }),
    });
    const ms = Date.now() - t0;
    assert.equal(res.statusCode, 400, res.body);
    const body = res.json() as { code: string; message: string };
    assert.equal(body.code, "invalid_argument");
    assert.match(body.message, /^rootfs_size_mb=300 is smaller than cloned rootfs size \d+ MiB$/);
    assert.ok(ms < 1000, `took ${ms} ms`);
  });

  async function waitCurl(url: string): Promise<string> {
    for (let i = 0; i < 50; i++) {
      const r = await exec("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "1", url], { allowFailure: true });
      if (r.stdout === "200") return r.stdout;
      await new Promise((res) => setTimeout(res, 100));
    }
    return "timeout";
  }
});
