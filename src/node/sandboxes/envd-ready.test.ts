import assert from "node:assert/strict";
import { closeSync, constants, existsSync, openSync, writeSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { signalReady } from "../../envd/ready-signal.ts";
import { ReadyFifo } from "./envd-ready.ts";

const sig = () => AbortSignal.timeout(10_000);
const writer = (f: ReadyFifo) => openSync(f.path, constants.O_WRONLY | constants.O_NONBLOCK);

describe("envd readiness FIFO", () => {
  it("ready on envd's word (envd's own signalReady), and the FIFO is gone after close", async () => {
    const f = await ReadyFifo.create(await mkdtemp(join(tmpdir(), "ready-")), "sbx1", sig());
    assert.equal(signalReady(writer(f)), true);
    assert.equal(await f.wait(5000, sig()), "ready");
    await f.close();
    assert.equal(existsSync(f.path), false);
  });

  it("closed when every writer leaves without the word, or sends anything else", async () => {
    const dir = await mkdtemp(join(tmpdir(), "ready-"));
    const silent = await ReadyFifo.create(dir, "sbx2", sig());
    closeSync(writer(silent));
    assert.equal(await silent.wait(5000, sig()), "closed");
    await silent.close();
    const other = await ReadyFifo.create(dir, "sbx3", sig());
    const fd = writer(other);
    writeSync(fd, "readx\n");
    assert.equal(await other.wait(5000, sig()), "closed");
    closeSync(fd);
    await other.close();
  });

  it("times out while a writer holds it without a word; an abort rejects", async () => {
    const f = await ReadyFifo.create(await mkdtemp(join(tmpdir(), "ready-")), "sbx4", sig());
    const fd = writer(f);
    assert.equal(await f.wait(50, sig()), "timeout");
    await assert.rejects(f.wait(5000, AbortSignal.timeout(20)));
    closeSync(fd);
    await f.close();
  });

  it("no writer yet is not the end: the word may come later", async () => {
    const f = await ReadyFifo.create(await mkdtemp(join(tmpdir(), "ready-")), "sbx5", sig());
    const waiting = f.wait(5000, sig());
    await new Promise((r) => setTimeout(r, 50));
    signalReady(writer(f));
    assert.equal(await waiting, "ready");
    await f.close();
  });

  it("envd leaves an fd alone that is not a FIFO, and an fd that is not open", async () => {
    const dir = await mkdtemp(join(tmpdir(), "ready-"));
    const fd = openSync(join(dir, "plain"), "w");
    assert.equal(signalReady(fd), false);
    closeSync(fd); // still open: signalReady did not close it
    assert.equal(signalReady(undefined), false);
    assert.equal(signalReady(1_000_000), false);
  });
});
