// nft scripts through libnftables in process (the nftables addon, as CI builds it): one
// transaction each, in the host's or a given network namespace, nft's own error on failure.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { addNetns, exec } from "../../src/core/exec.ts";
import { REPO_DIR } from "../../src/node/agent.ts";
import { runNft } from "../../src/node/network/nftables.ts";
import { isRoot } from "./helpers.ts";

describe("nft scripts in process", { skip: !isRoot && "needs root (nftables)" }, () => {
  let dir = "";
  let netns = "";
  const table = `space_nfttest_${process.pid}`;
  const o = () => ({ signal: AbortSignal.timeout(30_000), timeoutMs: 30_000 });
  const list = async (ns?: string) => (await exec("nft", ["list", "tables"], ns ? { namespaces: { net: ns } } : {})).stdout;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "space-nft-"));
    netns = join(dir, "ns");
    await addNetns(netns);
  });
  after(async () => {
    await exec("nft", ["delete", "table", "inet", table], { allowFailure: true });
    await exec("umount", [netns], { allowFailure: true });
    await rm(dir, { recursive: true, force: true });
  });

  it("the addon is built (npm run build:envd)", () => {
    assert.ok(existsSync(join(REPO_DIR, "dist", "node", "nftables.node")));
  });

  it("runs a script in a network namespace, not the host's", async () => {
    await runNft(`add table inet ${table}\nadd chain inet ${table} c\n`, { ...o(), netns });
    assert.match(await list(netns), new RegExp(`table inet ${table}`));
    assert.doesNotMatch(await list(), new RegExp(table));
  });

  it("runs a script on the host as one transaction: a failing line applies none of it, and says which", async () => {
    await assert.rejects(runNft(`add table inet ${table}\nadd chain inet ${table} c\nadd rule inet ${table} nosuchchain accept\n`, o()), /nosuchchain|No such file/);
    assert.doesNotMatch(await list(), new RegExp(table));
    await runNft(`add table inet ${table}\n`, o());
    assert.match(await list(), new RegExp(`table inet ${table}`));
  });

  it("runs many at once, each whole", async () => {
    await Promise.all(Array.from({ length: 20 }, (_, i) => runNft(`add chain inet ${table} c${i}\n`, o())));
    const chains = (await exec("nft", ["list", "table", "inet", table])).stdout.match(/chain c\d+/g) ?? [];
    assert.equal(chains.length, 20);
  });
});
