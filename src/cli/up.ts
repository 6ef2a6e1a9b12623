/**
 * `space up`: the whole platform on one machine — api, gateway, controller and one node
 * agent in one process, on an embedded database (PGlite) and a filesystem blob store in
 * the data directory. Prints what a user needs to point the E2B SDK at it.
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Config } from "../core/config.ts";
import { lockDataDir } from "../core/lock.ts";
import { ensureSecrets } from "./secrets.ts";
import { bootstrapDefaultTenant } from "./bootstrap.ts";
import { openControlPlane, serveMetrics, startApiServer } from "./processes.ts";
import { controllerLoops, startController } from "./controller.ts";
import { createNodeAgent } from "../node/agent.ts";
import { hostScopeOf } from "../node/ctl/standalone.ts";
import { localNodeRoute, reconciledOnNode, storePublisher, unhealthyOnNode, wantedOnNode } from "./node-link.ts";
import { parseSelector } from "../core/selector.ts";
import { capacitySettings } from "../substrate/capacity.ts";
import type { ControlPlane } from "./processes.ts";
import { ENDPOINTS_FILE, type Endpoints } from "./client/connection.ts";

export async function runUp(config: Config): Promise<() => Promise<void>> {
  mkdirSync(config.SPACE_DATA_DIR, { recursive: true, mode: 0o700 });
  const lock = lockDataDir(config.SPACE_DATA_DIR);
  const stops: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const stop of stops.reverse()) {
      try {
        await stop();
      } catch (e) {
        process.stderr.write(`stop failed: ${String(e)}\n`);
      }
    }
    lock.release();
  };
  try {
    const secrets = ensureSecrets(config.SPACE_DATA_DIR);
    const cp = await openControlPlane(
      config,
      {
        adminToken: config.SPACE_ADMIN_TOKEN || secrets.adminToken,
        internalToken: config.SPACE_INTERNAL_TOKEN || secrets.internalToken,
      },
      "space",
    );
    stops.push(() => cp.tracing?.shutdown() ?? Promise.resolve());
    stops.push(() => cp.db.close());
    const { usable } = await bootstrapDefaultTenant(cp.db, secrets.apiKey);
    if (!usable) cp.log.warn("the default API key was revoked or its tenant disabled (Admin API): the E2B_API_KEY printed below does not authenticate");

    // The node first: the controller dispatches queued work (e.g. creates that survived a
    // restart) as soon as it leads, and that work needs the node.
    const node = await startLocalNode(cp);
    stops.push(() => node.stop());

    const controller = await startController(cp, controllerLoops);
    stops.push(() => controller.stop());
    // The controller's own port, as `space controller` serves it (one registry here: every family).
    if (config.SPACE_CONTROLLER_METRICS_PORT) {
      const metrics = await serveMetrics(cp, config.SPACE_CONTROLLER_METRICS_PORT);
      stops.push(() => metrics.close());
    }

    const api = await startApiServer(cp, { localSandboxDomain: true, localNode: localNodeRoute(node.agent) });
    stops.push(() => api.stop());

    const apiUrl = config.SPACE_PUBLIC_API_URL || `http://${config.SPACE_API_HOST}:${portOf(api.url)}`;
    // Where this `space up` listens, for the client commands run on this machine (client/connection.ts).
    writeEndpoints(config.SPACE_DATA_DIR, { apiUrl, sandboxUrl: api.gatewayUrl });
    printEnvironment({ apiUrl, sandboxUrl: api.gatewayUrl, sandboxDomain: api.sandboxDomain, apiKey: secrets.apiKey, adminToken: cp.adminToken, dataDir: config.SPACE_DATA_DIR });
    return stopAll;
  } catch (e) {
    await stopAll();
    throw e;
  }
}

/** The node agent in this process, publishing straight to the store. */
async function startLocalNode(cp: ControlPlane) {
  const { config } = cp;
  let url = config.SPACE_NODE_ADVERTISE_URL || `http://${config.SPACE_NODE_HOST}:${config.SPACE_NODE_PORT}`;
  const publish = storePublisher(cp.db, () => url, config.SPACE_NODE_GROUP, parseSelector(config.SPACE_NODE_LABELS), capacitySettings(config));
  const agent = createNodeAgent(config, cp.log, {
    internalToken: cp.internalToken,
    publish,
    wanted: wantedOnNode(cp.db, () => agent.nodeId),
    reconciled: reconciledOnNode(cp.db, cp.layer.sandboxes, () => agent.nodeId, cp.log),
    unhealthy: unhealthyOnNode(cp.layer.sandboxes, () => agent.nodeId, cp.log),
    hostScope: hostScopeOf(config),
    metrics: cp.metrics,
    ...(config.SPACE_NODE_RUNTIME_STATE_DIR ? { runtimeStateDir: config.SPACE_NODE_RUNTIME_STATE_DIR } : {}),
  });
  await agent.start();
  const listening = await agent.app.listen({ host: config.SPACE_NODE_HOST, port: config.SPACE_NODE_PORT });
  if (!config.SPACE_NODE_ADVERTISE_URL) url = listening;
  // Register now rather than at the first heartbeat, so the first create finds the node.
  await publish(await agent.inventory());
  return { agent, url, stop: () => agent.stop() };
}

function writeEndpoints(dataDir: string, e: Endpoints): void {
  const path = join(dataDir, ENDPOINTS_FILE);
  writeFileSync(`${path}.tmp`, JSON.stringify(e, null, 2), { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
}

function portOf(url: string): number {
  return Number(new URL(url).port);
}

function printEnvironment(e: { apiUrl: string; sandboxUrl: string; sandboxDomain: string | null; apiKey: string; adminToken: string; dataDir: string }) {
  const lines = [
    "",
    "SPACE is up.",
    `  data directory: ${e.dataDir}`,
    `  API:            ${e.apiUrl}  (health ${e.apiUrl}/health, metrics ${e.apiUrl}/metrics)`,
    ...(e.sandboxDomain ? [`  public ports:   <port>-<sandbox id>.${e.sandboxDomain}  (sbx.getHost(port))`] : []),
    "",
    "Point the e2b SDK at it:",
    `export E2B_API_URL=${e.apiUrl}`,
    `export E2B_SANDBOX_URL=${e.sandboxUrl}`,
    `export E2B_API_KEY=${e.apiKey}`,
    "",
    "Admin token (Authorization: Bearer …):",
    `export SPACE_ADMIN_TOKEN=${e.adminToken}`,
    "",
  ];
  process.stdout.write(lines.join("\n") + "\n");
}
