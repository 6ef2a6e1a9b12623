/**
 * envd's log ring over its own route (`GET ENVD_LOGS_PATH?after=`, what the node pulls):
 * process start/end lines, requests at debug (the node's own routes and /health left
 * out), paging by sequence number, the access token, bad input.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { ENVD_LOGS_PATH, EnvdLogsPage } from "../../src/contract/envd-logs.ts";
import { startEnvd, type RunningEnvd } from "./harness.ts";

describe("envd: its log ring", () => {
  let envd: RunningEnvd;
  const token = "tok-" + randomBytes(8).toString("hex");

  before(async () => {
    envd = await startEnvd({ bundle: true, token, env: { SPACE_ENVD_LOG_ENTRIES: "50" } });
  });
  after(async () => {
    await envd?.stop();
  });

  const page = async (after = 0) => {
    const r = await fetch(`${envd.url}${ENVD_LOGS_PATH}?after=${after}`, { headers: { "x-access-token": token } });
    assert.equal(r.status, 200);
    return EnvdLogsPage.parse(await r.json());
  };

  test("process lines at info (warn for a failure), requests at debug, paged after a sequence number", async () => {
    const c = envd.process({ token });
    for await (const _ of c.start({ process: { cmd: "/bin/sh", args: ["-c", "exit 4"], envs: {} }, stdin: false })) void _;
    await fetch(`${envd.url}/health`);
    const first = await page();
    const started = first.entries.find((e) => e.message === "process started");
    assert.deepEqual([started?.level, started?.fields.cmd, started?.fields.args, started?.fields.logger], ["info", "/bin/sh", "-c exit 4", "processSvc"]);
    const ended = first.entries.find((e) => e.message === "process ended");
    assert.deepEqual([ended?.level, ended?.fields.exitCode], ["warn", "4"]);
    const requests = first.entries.filter((e) => e.message === "request");
    assert.ok(requests.some((e) => e.level === "debug" && e.fields.path === "/process.Process/Start"), JSON.stringify(requests));
    assert.ok(!requests.some((e) => e.fields.path === "/health" || e.fields.path!.startsWith("/space/")));
    assert.equal(first.head, first.entries.at(-1)!.seq);
    const rest = await page(first.entries[1]!.seq);
    assert.deepEqual(rest.entries.map((e) => e.seq), first.entries.slice(2).map((e) => e.seq));
    assert.equal(rest.boot, first.boot);
  });

  test("the bound from SPACE_ENVD_LOG_ENTRIES; no token 401; a bad cursor 400", async () => {
    const c = envd.process({ token });
    for (let i = 0; i < 30; i++) for await (const _ of c.start({ process: { cmd: "/bin/true", args: [], envs: {} }, stdin: false })) void _;
    assert.equal((await page()).entries.length, 50);
    assert.equal((await fetch(`${envd.url}${ENVD_LOGS_PATH}`)).status, 401);
    assert.equal((await fetch(`${envd.url}${ENVD_LOGS_PATH}?after=-1`, { headers: { "x-access-token": token } })).status, 400);
  });
});
