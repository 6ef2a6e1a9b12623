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
import "../gen/process/process_pb.ts";
import "../gen/filesystem/filesystem_pb.ts";
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
