/**
 * envd benchmark: `echo hi` round trip (Start stream until `end`) over 200 runs on a
 * warm envd, against a raw child_process.spawn of the same command; then file
 * write/read throughput through POST/GET /files against a local disk copy.
 * Run: node --import tsx bench/envd.ts
 */
import { spawn } from "node:child_process";
import { createReadStream, createWriteStream, existsSync, rmSync } from "node:fs";
import { Agent, request } from "node:http";
import { pipeline } from "node:stream/promises";
import { performance } from "node:perf_hooks";
import { envelope, startEnvd } from "../test/envd/harness.ts";
import { percentile } from "./support/stats.ts";

const RUNS = 200;
const FILE_MIB = 256;
/** The SDK's shape is `/bin/bash -l -c <cmd>`; a login shell's startup cost depends on the
 * machine's /etc/profile, so the envd overhead is also measured with `/bin/echo`. */
const CMDS = [
  { cmd: "/bin/echo", args: ["hi"] },
  { cmd: "/bin/bash", args: ["-c", "echo hi"] },
  { cmd: "/bin/bash", args: ["-l", "-c", "echo hi"] },
];

const fmt = (x: number) => x.toFixed(2);

async function rawSpawn(CMD: { cmd: string; args: string[] }): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const c = spawn(CMD.cmd, CMD.args, { stdio: ["ignore", "pipe", "pipe"] });
    c.stdout.resume();
    c.stderr.resume();
    c.on("error", reject);
    c.on("close", () => resolve());
  });
}

const envd = await startEnvd({ bundle: existsSync("dist/envd/envd.mjs") });
try {
  const client = envd.process({ user: "root", binary: false });
  for (const CMD of CMDS) {
    const runs = CMD.args.includes("-l") ? 50 : RUNS;
    const viaEnvd = async () => {
      let out = "";
      for await (const m of client.start({ process: { ...CMD, envs: {} }, stdin: false })) {
        const e = m.event!.event;
        if (e.case === "data") out += Buffer.from(e.value.output.value!).toString();
      }
      if (out !== "hi\n") throw new Error(`unexpected output ${JSON.stringify(out)}`);
    };
    for (let i = 0; i < 10; i++) {
      await viaEnvd();
      await rawSpawn(CMD);
    }
    const envdMs: number[] = [];
    const rawMs: number[] = [];
    for (let i = 0; i < runs; i++) {
      let t = performance.now();
      await viaEnvd();
      envdMs.push(performance.now() - t);
      t = performance.now();
      await rawSpawn(CMD);
      rawMs.push(performance.now() - t);
    }
    console.log(`echo hi round trip (${runs} runs, '${CMD.cmd} ${CMD.args.join(" ")}')`);
    console.log(`  envd (Connect JSON, HTTP/1.1): median ${fmt(percentile(envdMs, 50))} ms  p99 ${fmt(percentile(envdMs, 99))} ms`);
    console.log(`  baseline child_process.spawn:  median ${fmt(percentile(rawMs, 50))} ms  p99 ${fmt(percentile(rawMs, 99))} ms`);
    console.log(
      `  ratio (median): ${fmt(percentile(envdMs, 50) / percentile(rawMs, 50))}x; overhead ${fmt(percentile(envdMs, 50) - percentile(rawMs, 50))} ms`,
    );
  }

  // The same Start with a bare keep-alive HTTP/1.1 client: envd's own cost without the
  // Connect client library's.
  {
    const agent = new Agent({ keepAlive: true });
    const body = envelope({ process: { cmd: "/bin/echo", args: ["hi"] }, stdin: false });
    const auth = "Basic " + Buffer.from("root:").toString("base64");
    const one = () =>
      new Promise<void>((resolve, reject) => {
        const req = request(
          `${envd.url}/process.Process/Start`,
          { method: "POST", agent, headers: { "content-type": "application/connect+json", authorization: auth } },
          (res) => {
            res.resume();
            res.on("end", () => resolve());
          },
        );
        req.on("error", reject);
        req.end(body);
      });
    const ms: number[] = [];
    for (let i = 0; i < RUNS + 20; i++) {
      const t = performance.now();
      await one();
      if (i >= 20) ms.push(performance.now() - t);
    }
    agent.destroy();
    console.log(`'/bin/echo hi' via a bare HTTP/1.1 client: median ${fmt(percentile(ms, 50))} ms  p99 ${fmt(percentile(ms, 99))} ms`);
  }

  const src = `/tmp/envd-bench-src-${process.pid}`;
  const dst = `/tmp/envd-bench-dst-${process.pid}`;
  const target = `/tmp/envd-bench-target-${process.pid}`;
  try {
    await pipeline(createReadStream("/dev/urandom", { end: FILE_MIB * 1048576 - 1 }), createWriteStream(src));
    let t = performance.now();
    await pipeline(createReadStream(src), createWriteStream(dst));
    const baseCopyS = (performance.now() - t) / 1000;
    t = performance.now();
    await new Promise<void>((resolve, reject) => {
      const req = request(
        `${envd.url}/files?path=${target}&username=root`,
        { method: "POST", headers: { "content-type": "application/octet-stream" } },
        (res) => {
          res.resume();
          res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error(`upload ${res.statusCode}`))));
        },
      );
      req.on("error", reject);
      createReadStream(src).pipe(req);
    });
    const upS = (performance.now() - t) / 1000;
    t = performance.now();
    await new Promise<void>((resolve, reject) => {
      request(`${envd.url}/files?path=${target}&username=root`, (res) => {
        pipeline(res, createWriteStream(dst)).then(resolve, reject);
      })
        .on("error", reject)
        .end();
    });
    const downS = (performance.now() - t) / 1000;
    console.log(`file throughput (${FILE_MIB} MiB, random bytes)`);
    console.log(`  write (POST /files octet-stream): ${fmt(FILE_MIB / upS)} MiB/s`);
    console.log(`  read  (GET /files identity):      ${fmt(FILE_MIB / downS)} MiB/s`);
    console.log(`  baseline local stream copy:       ${fmt(FILE_MIB / baseCopyS)} MiB/s`);
    console.log(`  ratio write/baseline ${fmt(baseCopyS / upS)}, read/baseline ${fmt(baseCopyS / downS)}`);
  } finally {
    for (const f of [src, dst, target]) rmSync(f, { force: true });
  }
} finally {
  await envd.stop();
}
