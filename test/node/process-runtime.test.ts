// The process runtime (SPACE_RUNTIME=process): plain directories for disks and the host's
// network, through the same sandbox manager as the OCI runtimes.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ENVD_PORT } from "../../src/contract/node-api.ts";
import { spec, startTestNode, type TestNode } from "./helpers.ts";

describe("process runtime", { timeout: 120_000 }, () => {
  let node: TestNode;
  before(async () => {
    node = await startTestNode({ env: { SPACE_RUNTIME: "process" } });
  });
  after(async () => node?.close());
  const sig = () => AbortSignal.timeout(60_000);

  it("offers only the base template", async () => {
    await assert.rejects(node.agent.manager!.create(spec({ template: "other" }), sig()), /template other is not available to the process runtime/);
  });

  it("runs a sandbox on loopback from a plain directory; stop, start, kill", async () => {
    const m = node.agent.manager!;
    const s = spec();
    const disk = join(node.dir, "node", "process-disks", s.sandboxId);
    const st = await m.create(s, sig());
    assert.equal(st.state, "running");
    assert.equal(st.address, "127.0.0.1");
    assert.notEqual(m.target(s.sandboxId, ENVD_PORT).port, ENVD_PORT, "envd on a port of its own");
    // The process runtime passes the readiness FIFO too: ready by envd's word, no /health poll.
    assert.equal(typeof st.timings?.envdEventMs, "number", JSON.stringify(st.timings));
    assert.ok(existsSync(disk));
    assert.deepEqual(await m.networkRecord(s.sandboxId, sig()), { observed: [], denied: [] });
    await m.setEgress(s.sandboxId, false, sig());
    assert.equal((await m.metrics(s.sandboxId, sig())).diskUsed, 0);
    await m.stop(s.sandboxId, sig());
    assert.ok(existsSync(disk), "a stopped sandbox keeps its disk");
    const again = await m.start(s.sandboxId, sig());
    assert.equal(again.state, "running");
    assert.equal(typeof again.timings?.envdEventMs, "number", `a start boots afresh, ready by envd's word too: ${JSON.stringify(again.timings)}`);
    await m.kill(s.sandboxId, sig());
    assert.ok(!existsSync(disk));
  });
});
