/**
 * The unmodified `e2b` SDK against envd. A stub control plane (create + kill only)
 * hands out envd's address through `sandboxUrl`; everything after creation is the
 * SDK talking to envd.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Sandbox, CommandExitError, FileType } from "e2b";
import { ensureTestUser, startEnvd, TEST_USER, waitFor, type RunningEnvd } from "./harness.ts";

const TOKEN = "sdk-test-token";

describe("e2b SDK against envd", () => {
  let envd: RunningEnvd;
  let api: Server;
  let apiUrl: string;
  let home: string;
  before(async () => {
    home = ensureTestUser().home;
    envd = await startEnvd({ snapshot: true, token: TOKEN });
    api = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        if (req.method === "POST" && /\/sandboxes$/.test(req.url ?? "")) {
          res.writeHead(201, { "content-type": "application/json" });
          res.end(
            JSON.stringify({
              sandboxID: "sdktestsandbox000001",
              templateID: "base",
              clientID: "local",
              envdVersion: "0.6.13",
              envdAccessToken: TOKEN,
              trafficAccessToken: null,
              domain: null,
            }),
          );
          return;
        }
        if (req.method === "DELETE") {
          res.writeHead(204);
          res.end();
          return;
        }
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ code: 404, message: "stub" }));
      });
    });
    await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
    apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
  });
  after(async () => {
    await envd?.stop();
    api?.close();
  });

  const create = () => Sandbox.create("base", { apiKey: "e2b_test", apiUrl, sandboxUrl: envd.url, secure: true });

  test("commands, files, list, watch, pty, background processes", async () => {
    const sbx = await create();
    const r = await sbx.commands.run("echo hi; whoami");
    assert.equal(r.stdout, `hi\n${TEST_USER}\n`);
    assert.equal(r.exitCode, 0);
    await assert.rejects(sbx.commands.run("exit 7"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 7);
    const asRoot = await sbx.commands.run("whoami", { user: "root" });
    assert.equal(asRoot.stdout, "root\n");

    const dir = `${home}/sdk-${process.pid}`;
    const w = await sbx.files.write(`${dir}/x.txt`, "content");
    assert.equal(w.path, `${dir}/x.txt`);
    assert.equal(await sbx.files.read(`${dir}/x.txt`), "content");
    const bytes = await sbx.files.read(`${dir}/x.txt`, { format: "bytes" });
    assert.equal(Buffer.from(bytes).toString(), "content");
    const list = await sbx.files.list(dir);
    assert.deepEqual(
      list.map((e) => [e.name, e.type]),
      [["x.txt", FileType.FILE]],
    );
    assert.equal(await sbx.files.exists(`${dir}/nope`), false);
    await sbx.files.makeDir(`${dir}/sub`);
    const info = await sbx.files.getInfo(`${dir}/x.txt`);
    assert.equal(info.owner, TEST_USER);
    await sbx.files.rename(`${dir}/x.txt`, `${dir}/sub/y.txt`);
    assert.equal(await sbx.files.read(`${dir}/sub/y.txt`), "content");

    const events: string[] = [];
    const handle = await sbx.files.watchDir(dir, (e) => void events.push(`${e.type}:${e.name}`), { recursive: true });
    await sbx.files.write(`${dir}/w.txt`, "1");
    await waitFor(() => events.some((e) => e.endsWith(":w.txt")), 3000, "watch event");
    await handle.stop();
    await sbx.files.remove(dir);

    const bg = await sbx.commands.run("sleep 30", { background: true });
    const procs = await sbx.commands.list();
    assert.ok(procs.some((p) => p.pid === bg.pid));
    assert.equal(await sbx.commands.kill(bg.pid), true);
    assert.equal(await sbx.commands.kill(999999), false);

    let ptyOut = "";
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void (ptyOut += Buffer.from(d).toString()) });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("echo $((7*6))pty; exit\n"));
    await pty.wait().catch(() => undefined);
    assert.match(ptyOut, /42pty/);

    const url = await sbx.downloadUrl(`${home}/.bashrc`);
    assert.equal((await fetch(url)).status, 200);
    await sbx.kill();
  });
});
