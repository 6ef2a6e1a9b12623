/**
 * Default platform guardrails (issue 27, item 9) against real namespaces: the well-known
 * cloud metadata addresses outside link-local stay closed under allow-all, served by the
 * fake internet so that a missing guardrail shows as an open connection; so do the
 * machine's own addresses (every interface's, not only the bridge's: these already held on main,
 * the input chain refuses them).
 */
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { networkInterfaces } from "node:os";
import { after, before, describe, test } from "node:test";
import { compileEcw, compileNative } from "../../src/sandboxes/egress-rules.ts";
import { httpTo, INET, METADATA, probe, startRig, tcpTo, type Rig } from "./harness.ts";

const isRoot = process.getuid?.() === 0;

describe("guardrail defaults: metadata addresses", { skip: !isRoot && "needs root (network namespaces, nft)", timeout: 120_000 }, () => {
  let rig: Rig;
  before(async () => {
    rig = await startRig();
  });
  after(async () => {
    await rig?.close();
  });

  test("100.100.100.200 (Alibaba Cloud metadata) is refused under allow-all and an explicit allow; the internet stays open", async () => {
    const s = await rig.claim(compileEcw(true, { allowOut: ["0.0.0.0/0", `${METADATA.alibaba}/32`] }));
    assert.deepEqual(await probe(s.netns, [tcpTo(METADATA.alibaba, 80), tcpTo(METADATA.alibaba, 5000), tcpTo(INET.a1, 80)]), ["ECONNREFUSED", "ECONNREFUSED", "open"]);
  });

  test("a domain rule whose name is the metadata address's Host does not open it through the egress proxy", async () => {
    const s = await rig.claim(compileNative({ allow_out: ["allowed.test"], default: "deny" }));
    const [r] = await probe(s.netns, [httpTo(METADATA.alibaba, "allowed.test")]);
    assert.notEqual(r, `ok ${METADATA.alibaba} allowed.test`);
    assert.doesNotMatch(String(r), /^ok /);
  });

  test("the machine's own addresses (every interface) are refused under allow-all, a service on 0.0.0.0 included", async () => {
    const own = Object.values(networkInterfaces()).flatMap((xs) => xs ?? []).filter((a) => a.family === "IPv4" && !a.internal).map((a) => a.address);
    const server = createServer((c) => c.end());
    await new Promise<void>((r) => server.listen(0, "0.0.0.0", () => r()));
    const port = (server.address() as { port: number }).port;
    try {
      const s = await rig.claim(compileEcw(true, { allowOut: ["0.0.0.0/0", ...own.map((a) => `${a}/32`)] }));
      const r = await probe(s.netns, own.map((a) => tcpTo(a, port)));
      assert.deepEqual(r, own.map(() => "ECONNREFUSED"), own.join(", "));
    } finally {
      server.close();
    }
  });
});
