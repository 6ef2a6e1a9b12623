import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { resolveLogFormat } from "./log.ts";

/** What one info line looks like on stdout in `format`, from a child process (pino writes to fd 1). */
function lineIn(format: "json" | "pretty"): string {
  const code = `import { createLogger } from "./src/core/log.ts"; createLogger("info", "space", "${format}").info({ sandboxId: "abc", token: "t0p" }, "sandbox created");`;
  const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

describe("log format", () => {
  it("auto is pretty on a terminal and JSON otherwise; json and pretty are what they say", () => {
    assert.equal(resolveLogFormat("auto", true), "pretty");
    assert.equal(resolveLogFormat("auto", false), "json");
    assert.equal(resolveLogFormat("json", true), "json");
    assert.equal(resolveLogFormat("pretty", false), "pretty");
  });

  it("json writes one JSON object a line; pretty writes a line for people; both redact", () => {
    const json = JSON.parse(lineIn("json")) as Record<string, unknown>;
    assert.equal(json.msg, "sandbox created");
    assert.equal(json.name, "space");
    assert.equal(json.token, "[redacted]");
    const pretty = lineIn("pretty");
    assert.throws(() => JSON.parse(pretty.split("\n")[0]!));
    assert.match(pretty, /INFO \(space\): sandbox created/);
    assert.match(pretty, /sandboxId: "abc"/);
    assert.doesNotMatch(pretty, /t0p/);
    assert.doesNotMatch(pretty, /\x1b\[/, "no colours when stdout is not a terminal");
  });
});
