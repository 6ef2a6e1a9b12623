// A slot's own side set up by netlink from inside its namespace (node/network/netlink.ts,
// through the spawn server's addon): the same links, address, route, neighbour and
// public-ports rule `ip` and `nft` made there, and a refusal that names the step.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { addNetns, exec } from "../../src/core/exec.ts";
import { spawnClient } from "../../src/core/spawn-client.ts";
import { getLink, linkIndexOf, NETLINK_NETFILTER, NETLINK_ROUTE, portsRule, sendNetlink, slotInside, slotVeth } from "../../src/node/network/netlink.ts";

const isRoot = process.getuid?.() === 0;
const NAME = `spnl${process.pid % 100_000}`;
const NETNS = `/run/netns/${NAME}`;
const inside = { net: NETNS };
const slot = { mac: "02:00:0a:d3:00:05", address: "10.211.0.5", prefix: 16, gateway: "10.211.0.1", gatewayMac: "02:11:22:33:44:55" };

describe("slot set-up by netlink", { skip: !isRoot && "needs root (network namespaces)" }, () => {
  before(async () => {
    await exec("mkdir", ["-p", "/run/netns"]);
    await addNetns(NETNS);
    await exec("ip", ["link", "add", `${NAME}b`, "type", "bridge"]);
  });
  after(async () => {
    await exec("ip", ["link", "delete", `${NAME}h`], { allowFailure: true });
    await exec("ip", ["link", "delete", `${NAME}b`], { allowFailure: true });
    await exec("ip", ["netns", "delete", NAME], { allowFailure: true });
  });

  it("makes the veth: the node's end marked, an isolated port of the bridge, up; the other end in the slot as eth0", async () => {
    const bridgeIndex = linkIndexOf(await sendNetlink(NETLINK_ROUTE, getLink(`${NAME}b`), {}));
    await sendNetlink(NETLINK_ROUTE, slotVeth({ hostVeth: `${NAME}h`, alias: "space-test-node", bridge: `${NAME}b`, bridgeIndex, netnsPath: NETNS, address: slot.address, mac: slot.mac }), {});
    const [h] = JSON.parse((await exec("ip", ["-d", "-j", "link", "show", `${NAME}h`])).stdout) as Array<{ ifalias: string; master: string; flags: string[]; linkinfo: { info_kind: string; info_slave_data: { isolated: boolean } } }>;
    assert.equal(h!.ifalias, "space-test-node");
    assert.equal(h!.master, `${NAME}b`);
    assert.ok(h!.flags.includes("UP"), JSON.stringify(h!.flags));
    assert.equal(h!.linkinfo.info_kind, "veth");
    assert.equal(h!.linkinfo.info_slave_data.isolated, true);
    const peer = JSON.parse((await exec("ip", ["-n", NAME, "-d", "-j", "link", "show", "eth0"])).stdout) as Array<{ linkinfo: { info_kind: string } }>;
    assert.equal(peer[0]?.linkinfo.info_kind, "veth");
    const neigh = JSON.parse((await exec("ip", ["-j", "neigh", "show", slot.address, "dev", `${NAME}b`])).stdout) as Array<{ lladdr: string; state: string[] }>;
    assert.deepEqual([neigh[0]?.lladdr, neigh[0]?.state], [slot.mac, ["PERMANENT"]]);
    await assert.rejects(
      sendNetlink(NETLINK_ROUTE, slotVeth({ hostVeth: `${NAME}h`, alias: "x", bridge: `${NAME}b`, bridgeIndex, netnsPath: "/run/netns/space-no-such-netns", address: slot.address, mac: slot.mac }), {}),
      /netlink: opening \/run\/netns\/space-no-such-netns ENOENT/,
    );
  });

  it("configures loopback, eth0, its address, the default route and the gateway's neighbour entry", async () => {
    const eth0 = linkIndexOf(await sendNetlink(NETLINK_ROUTE, getLink("eth0"), inside));
    const shown = JSON.parse((await exec("ip", ["-n", NAME, "-j", "link", "show", "eth0"])).stdout) as Array<{ ifindex: number }>;
    assert.equal(eth0, shown[0]!.ifindex);
    await sendNetlink(NETLINK_ROUTE, slotInside({ eth0, ...slot }), inside);

    const links = JSON.parse((await exec("ip", ["-n", NAME, "-j", "addr", "show"])).stdout) as Array<{ ifname: string; flags: string[]; address: string; addr_info: Array<{ family: string; local: string; prefixlen: number }> }>;
    const lo = links.find((l) => l.ifname === "lo")!;
    const eth = links.find((l) => l.ifname === "eth0")!;
    assert.ok(lo.flags.includes("UP"), JSON.stringify(lo));
    assert.ok(eth.flags.includes("UP"), JSON.stringify(eth));
    assert.equal(eth.address, slot.mac);
    assert.deepEqual(eth.addr_info.filter((a) => a.family === "inet").map((a) => `${a.local}/${a.prefixlen}`), [`${slot.address}/${slot.prefix}`]);
    const routes = JSON.parse((await exec("ip", ["-n", NAME, "-j", "route", "show", "default"])).stdout) as Array<{ gateway: string; dev: string }>;
    assert.deepEqual(routes.map((r) => [r.gateway, r.dev]), [[slot.gateway, "eth0"]]);
    const neigh = JSON.parse((await exec("ip", ["-n", NAME, "-j", "neigh", "show", slot.gateway])).stdout) as Array<{ lladdr: string; state: string[] }>;
    assert.equal(neigh[0]?.lladdr, slot.gatewayMac);
    assert.deepEqual(neigh[0]?.state, ["PERMANENT"]);
  });

  it("adds the public-ports rule nft made from its script", async () => {
    await sendNetlink(NETLINK_NETFILTER, portsRule(slot.gateway, slot.address, 49983), inside);
    const ruleset = (await exec("ip", ["netns", "exec", NAME, "nft", "list", "ruleset"])).stdout;
    assert.equal(
      ruleset.replace(/\s+/g, " ").trim(),
      `table ip space_ports { chain prerouting { type nat hook prerouting priority dstnat; policy accept; iifname "eth0" ip saddr ${slot.gateway} ip daddr ${slot.address} tcp dport != 49983 dnat to 127.0.0.1 } }`,
    );
  });

  it("names the refused step and the kernel's reason", async () => {
    const eth0 = linkIndexOf(await sendNetlink(NETLINK_ROUTE, getLink("eth0"), inside));
    await assert.rejects(sendNetlink(NETLINK_ROUTE, slotInside({ eth0, ...slot }), inside), /addr add 10\.211\.0\.5\/16 dev eth0: EEXIST \(.+\)/);
    await assert.rejects(sendNetlink(NETLINK_ROUTE, getLink("eth9"), inside), /link show eth9: ENODEV/);
    await assert.rejects(sendNetlink(NETLINK_ROUTE, getLink("eth0"), { net: "/run/netns/space-no-such-netns" }), /joining the namespace \/run\/netns\/space-no-such-netns ENOENT/);
  });

  it("answers a malformed request with an error and keeps serving", async () => {
    // Before the answer, the addon's type error ended the spawn server and every command in flight with it.
    const reply = await spawnClient.run({ netlink: "AAAA", protocol: "route" as unknown as number, namespaces: {}, timeoutMs: 10_000 });
    assert.match("error" in reply ? reply.error : "", /netlink: .*netlinkIn\(namespaces, protocol, request: Buffer\[, files\]\)/);
    assert.equal((await exec("true", [])).exitCode, 0);
  });
});
