/**
 * The client's own floor on this machine: the e2b SDK's `commands.run('true')` and
 * `Sandbox.create()` → `commands.run('echo hi')` against a server that answers each call from
 * bytes prepared before the run (no store, no sandbox, no process). No server can answer the
 * SDK faster than this; what SPACE's rows spend above it is SPACE's (and the command's own).
 *
 *   npm run bench -- sdk-floor [--n 300] [--json]   (bench -- ttfc runs it: --floor N)
 *
 * The server is in this process (one loop with the SDK, as a server on another core would not
 * be): its share is a few microseconds a call, the answers being prepared bytes.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { Sandbox } from "e2b";
import { percentile } from "./support/stats.ts";

/** One Connect envelope (flags, big-endian length, JSON). */
function envelope(message: unknown, flags = 0): Buffer {
  const json = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** Process.Start's answer to `echo hi`: its start, its output, its end, the end of the stream. */
const START = Buffer.concat([
  envelope({ event: { start: { pid: 42 } } }),
  envelope({ event: { data: { stdout: Buffer.from("hi\n").toString("base64") } } }),
  envelope({ event: { end: { exitCode: 0, exited: true, status: "exit status 0" } } }),
  envelope({}, 2),
]);

function stub(): Promise<Server> {
  let n = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "POST" && (req.url === "/sandboxes" || req.url === "/v2/sandboxes")) {
        const sandbox = { sandboxID: `floor${String(++n).padStart(15, "0")}`, templateID: "base", clientID: "floor", envdVersion: "0.6.13", envdAccessToken: "floor" };
        res.writeHead(201, { "content-type": "application/json" });
        res.end(JSON.stringify(sandbox));
      } else if (req.method === "POST" && req.url === "/process.Process/Start") {
        res.writeHead(200, { "content-type": "application/connect+json" });
        res.end(START);
      } else {
        res.writeHead(404);
        res.end();
      }
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

interface Floor {
  n: number;
  /** commands.run('true') on one sandbox. */
  commandMs: { median: number; p99: number };
  /** Sandbox.create() → commands.run('echo hi'). */
  createAndCommandMs: { median: number; p99: number };
}

const stats = (ms: number[]) => {
  const at = (p: number) => Math.round(percentile(ms, p) * 100) / 100;
  return { median: at(50), p99: at(99) };
};

async function sdkFloor(n: number): Promise<Floor> {
  const server = await stub();
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const opts = { apiUrl: url, sandboxUrl: url, apiKey: "e2b_floor" };
  try {
    const timed = async (f: () => Promise<unknown>, warmUp: number) => {
      for (let i = 0; i < warmUp; i++) await f();
      const out: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        await f();
        out.push(performance.now() - t0);
      }
      return stats(out);
    };
    const sb = await Sandbox.create(opts);
    const commandMs = await timed(() => sb.commands.run("true"), 100);
    const createAndCommandMs = await timed(async () => {
      const r = await (await Sandbox.create(opts)).commands.run("echo hi");
      if (r.stdout !== "hi\n") throw new Error(`unexpected stdout ${JSON.stringify(r.stdout)}`);
    }, 50);
    return { n, commandMs, createAndCommandMs };
  } finally {
    server.close();
  }
}

{
  const { values } = parseArgs({ options: { n: { type: "string", default: "300" }, json: { type: "boolean", default: false } } });
  const floor = await sdkFloor(Number(values.n));
  if (values.json) process.stdout.write(`${JSON.stringify({ bench: "sdk-floor", ...floor }, null, 2)}\n`);
  else {
    process.stdout.write(`The e2b SDK against a server answering from prepared bytes (n ${floor.n})\n`);
    process.stdout.write(`  commands.run('true')                      median ${floor.commandMs.median} ms  p99 ${floor.commandMs.p99} ms\n`);
    process.stdout.write(`  Sandbox.create → commands.run('echo hi')  median ${floor.createAndCommandMs.median} ms  p99 ${floor.createAndCommandMs.p99} ms\n`);
  }
}
