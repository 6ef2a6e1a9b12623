/**
 * envd's V8 startup-snapshot entry (scripts/build-envd.mjs builds dist/envd/envd.blob;
 * run as `node --snapshot-blob envd.blob <flags>`). Building the snapshot evaluates the
 * modules imported below, so a sandbox's envd starts without compiling the bundle or
 * building the protobuf descriptors. Node 20 cannot serialize node:http's parser, so the
 * HTTP server (start.ts, with @connectrpc/connect-node) is loaded when envd starts.
 * Nothing here may read the environment, the clock or the process at import time: that
 * would freeze the build machine's values into the snapshot.
 */
import { startupSnapshot } from "node:v8";
import { dirname, resolve } from "node:path";
import { create, fromBinary, fromJsonString, toBinary, toJsonString, type DescMessage } from "@bufbuild/protobuf";
import { Process, ProcessEventSchema, StartResponseSchema } from "../gen/process/process_pb.ts";
import { Filesystem } from "../gen/filesystem/filesystem_pb.ts";
import "./envd-config.ts";
import "./state.ts";
import "./users.ts";
import "./request-auth.ts";
import "./connect-errors.ts";
import "./process/manager.ts";
import "./process/process-service.ts";
import "./filesystem/metadata.ts";
import "./filesystem/watchers.ts";
import "./filesystem/filesystem-service.ts";
import "./http/files.ts";
import { warmInitBody } from "./http/system.ts";
import "./reaper.ts";
import "./ready-signal.ts";

warmInitBody();
warmCodecs();
// Every request makes an AbortController; the first one paid for loading its internals.
new AbortController().abort();

/**
 * protobuf-es builds each message type's binary reader and writer on its first use, and
 * V8 compiles a function on its first call: a sandbox's first request paid for both. Here
 * every request and response type of envd's services (and the events of a process, set)
 * is encoded and decoded once, binary and JSON, so the snapshot holds them built.
 */
function warmCodecs(): void {
  const roundTrip = (schema: DescMessage, init?: Record<string, unknown>) => {
    const m = create(schema, init);
    fromBinary(schema, toBinary(schema, m));
    fromJsonString(schema, toJsonString(schema, m));
  };
  for (const service of [Process, Filesystem]) for (const method of service.methods) for (const s of [method.input, method.output]) roundTrip(s);
  const event = (e: Record<string, unknown>) => ({ event: create(ProcessEventSchema, e) });
  roundTrip(Process.method.start.input, { process: { cmd: "/bin/bash", args: ["-l", "-c", "true"], envs: { A: "b" }, cwd: "/" }, stdin: false, tag: "t" });
  roundTrip(StartResponseSchema, event({ event: { case: "start", value: { pid: 1 } } }));
  roundTrip(StartResponseSchema, event({ event: { case: "data", value: { output: { case: "stdout", value: new Uint8Array([104, 105]) } } } }));
  roundTrip(StartResponseSchema, event({ event: { case: "end", value: { exitCode: 1, exited: true, status: "exit status 1", error: "exit status 1" } } }));
  roundTrip(StartResponseSchema, event({ event: { case: "keepalive", value: {} } }));
}

/** The blob's directory from `--snapshot-blob <path>` (the bundle's directory), absolute. */
function blobDir(execArgv: string[]): string {
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i]!;
    if (a === "--snapshot-blob" && execArgv[i + 1]) return resolve(dirname(execArgv[i + 1]!));
    if (a.startsWith("--snapshot-blob=")) return resolve(dirname(a.slice("--snapshot-blob=".length)));
  }
  throw new Error(`envd: --snapshot-blob <path> missing from node's flags (${execArgv.join(" ")})`);
}

startupSnapshot.setDeserializeMainFunction(() => {
  // Without a script argument, argv[1] is the first of envd's own flags.
  const argv = process.argv.slice(1);
  const dir = blobDir(process.execArgv);
  void import("./start.ts").then((m) => m.startEnvd(argv, dir));
});
