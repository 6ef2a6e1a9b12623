/**
 * `space node`: the node agent on its own host, linked to the control plane over HTTP
 * (registration with verify, heartbeats). Its host objects (bridge, nft table, veth
 * prefix, cgroup parent, runtime state dir, slot range, node dir) come from the config,
 * so several agents can share a machine (tests, `space lab`).
 */
import type { Registry } from "prom-client";
import type { Config } from "../../core/config.ts";
import { SpaceError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { VERSION } from "../../core/version.ts";
import { parseSelector } from "../../core/selector.ts";
import { createNodeAgent, type NodeAgentDeps } from "../agent.ts";
import { createControlPlaneLink } from "./registration.ts";

export function hostScopeOf(config: Config): NonNullable<NodeAgentDeps["hostScope"]> {
  return {
    ...(config.SPACE_NODE_BRIDGE ? { bridge: config.SPACE_NODE_BRIDGE } : {}),
    ...(config.SPACE_NODE_NFT_TABLE ? { nftTable: config.SPACE_NODE_NFT_TABLE } : {}),
    ...(config.SPACE_NODE_VETH_PREFIX ? { vethPrefix: config.SPACE_NODE_VETH_PREFIX } : {}),
    ...(config.SPACE_NODE_CGROUP_PARENT ? { cgroupParent: config.SPACE_NODE_CGROUP_PARENT } : {}),
  };
}

export async function startStandaloneNode(config: Config, token: string, logger: Logger, metrics?: Registry): Promise<() => Promise<void>> {
  if (config.SPACE_SUBSTRATE === "kubernetes") {
    const { startKubeletNode } = await import("../kubelet/kubelet-node.ts");
    return startKubeletNode(config, token, logger, metrics);
  }
  if (!config.SPACE_NODE_CONTROL_URL) {
    throw new SpaceError(
      "invalid_argument",
      "SPACE_NODE_CONTROL_URL must be set: the control-plane URL a standalone `space node` registers with",
    );
  }
  let address = config.SPACE_NODE_ADVERTISE_URL || `http://${config.SPACE_NODE_HOST}:${config.SPACE_NODE_PORT}`;
  const link = createControlPlaneLink({
    controlUrl: config.SPACE_NODE_CONTROL_URL,
    token,
    address: () => address,
    nodeGroup: config.SPACE_NODE_GROUP,
    labels: parseSelector(config.SPACE_NODE_LABELS),
    version: VERSION,
    logger: logger.child({ component: "node-ctl" }),
  });
  const agent = createNodeAgent(config, logger, {
    internalToken: token,
    publish: (inv) => link.publish(inv),
    wanted: () => link.wanted(agent.nodeId),
    reconciled: (kept) => link.reconciled(agent.nodeId, kept),
    unhealthy: (sandboxId, reason) => link.unhealthy(agent.nodeId, sandboxId, reason),
    hostScope: hostScopeOf(config),
    ...(config.SPACE_NODE_RUNTIME_STATE_DIR ? { runtimeStateDir: config.SPACE_NODE_RUNTIME_STATE_DIR } : {}),
    progress: false,
    ...(metrics ? { metrics } : {}),
  });
  await agent.start();
  try {
    const listening = await agent.app.listen({ host: config.SPACE_NODE_HOST, port: config.SPACE_NODE_PORT });
    if (!config.SPACE_NODE_ADVERTISE_URL) address = listening;
    await link.registerUntil(() => agent.inventory(), Date.now() + config.SPACE_NODE_REGISTER_DEADLINE_MS);
  } catch (e) {
    await agent.stop().catch(() => {});
    throw e;
  }
  logger.info({ nodeId: agent.nodeId, address, group: config.SPACE_NODE_GROUP }, "node up");
  process.stdout.write(`SPACE node ${agent.nodeId} is up at ${address} (group ${config.SPACE_NODE_GROUP})\n`);
  return () => agent.stop();
}
