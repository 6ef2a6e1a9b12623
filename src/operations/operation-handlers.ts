/**
 * The handler of every operation kind (exhaustive over operation-kind.ts), one module
 * per kind family; the dispatcher (src/controller/dispatcher.ts) claims and runs them.
 */
import type { Logger } from "../core/log.ts";
import type { Db } from "../store/db.ts";
import type { SandboxService } from "../sandboxes/service.ts";
import type { OperationHandler } from "./handler.ts";
import type { OperationKind } from "./operation-kind.ts";
import { sandboxCreate } from "./sandbox-create.ts";
import { sandboxDelete } from "./sandbox-delete.ts";
import { sandboxFork, sandboxPause, sandboxRestore, sandboxResume, sandboxStart, sandboxStop, sandboxSuspend } from "./sandbox-lifecycle.ts";
import { commandRun } from "./command-run.ts";
import { commandCancel } from "./command-cancel.ts";
import { templateBuild } from "./template-build.ts";
import { volumeCreate, volumeDelete } from "./volume-ops.ts";

export interface HandlerDeps {
  db: Db;
  sandboxes: SandboxService;
  log: Logger;
}

export function createOperationHandlers(deps: HandlerDeps): Readonly<Record<OperationKind, OperationHandler>> {
  return {
    "sandbox.create": sandboxCreate(deps),
    "sandbox.delete": sandboxDelete(deps),
    "sandbox.pause": sandboxPause(deps),
    "sandbox.resume": sandboxResume(deps),
    "sandbox.stop": sandboxStop(deps),
    "sandbox.start": sandboxStart(deps),
    "sandbox.suspend": sandboxSuspend(deps),
    "sandbox.restore": sandboxRestore(deps),
    "sandbox.fork": sandboxFork(deps),
    "command.run": commandRun(deps),
    "command.cancel": commandCancel(deps),
    "template.build": templateBuild(deps),
    "volume.create": volumeCreate(deps),
    "volume.delete": volumeDelete(deps),
  };
}
