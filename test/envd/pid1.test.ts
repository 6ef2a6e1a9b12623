import { test } from "node:test";
import assert from "node:assert/strict";
import { startEnvd, waitFor } from "./harness.ts";

async function run(envd: Awaited<ReturnType<typeof startEnvd>>, cmd: string): Promise<string> {
  let out = "";
  for await (const m of envd.process({ user: "root" }).start({ process: { cmd: "/bin/bash", args: ["-c", cmd], envs: {} } })) {
    const e = m.event!.event;
    if (e.case === "data") out += Buffer.from(e.value.output.value!).toString();
  }
  return out;
}

test("envd as PID 1: reaps orphaned zombies, exits cleanly on SIGTERM", async () => {
  const envd = await startEnvd({ snapshot: true, pid1: true });
  try {
    assert.equal((await run(envd, "echo $PPID")).trim(), "1");
    // The background sleeps outlive their shell and are re-parented to PID 1.
    await run(envd, "for i in 1 2 3; do sleep 0.1 & done; exit 0");
    const zombies = () => run(envd, "cat /proc/[0-9]*/stat 2>/dev/null | awk '$3==\"Z\"' | wc -l");
    await waitFor(async () => (await zombies()).trim() === "0", 5000, "orphans to be reaped");
    // SIGTERM to PID 1 (a handled signal) ends envd cleanly; its children go with it.
    await run(envd, "sleep 30 >/dev/null 2>&1 & disown; true");
  } finally {
    await envd.stop();
  }
});

test("envd as PID 1: orphans that end while nothing else runs are reaped at their end, not at a later command's", async () => {
  const envd = await startEnvd({ snapshot: true, pid1: true });
  try {
    // The sleeps end ~0.3 s after their shell; no process envd tracks ends after them.
    await run(envd, "for i in 1 2 3; do sleep 0.3 & done; exit 0");
    await new Promise((r) => setTimeout(r, 1500));
    // Counted before this command ends (its own end would make envd sweep).
    assert.equal((await run(envd, "cat /proc/[0-9]*/stat 2>/dev/null | awk '$3==\"Z\"' | wc -l")).trim(), "0");
  } finally {
    await envd.stop();
  }
});
