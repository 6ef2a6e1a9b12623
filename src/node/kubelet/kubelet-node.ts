/**
 * `space node` with SPACE_SUBSTRATE=kubernetes: the node agent plays kubelet for its own
 * virtual Node (./virtual-kubelet.ts) instead of registering with the control plane over
 * HTTP. Its Node is named after its node id.
 */
import type { Registry } from "prom-client";
import type { Config } from "../../core/config.ts";
import type { Logger } from "../../core/log.ts";
import { VERSION } from "../../core/version.ts";
import { parseSelector } from "../../core/selector.ts";
import { createKubeApi, kubeConnectionOf, type KubeApi } from "../../kube/kube-api.ts";
import { createNodeAgent, type NodeAgent } from "../agent.ts";
import { hostScopeOf } from "../ctl/standalone.ts";
import { VirtualKubelet } from "./virtual-kubelet.ts";

export interface KubeletNode {
  agent: NodeAgent;
  kubelet: VirtualKubelet;
  stop(): Promise<void>;
}

/** Starts agent + virtual kubelet; `kube` overrides the connection (tests). */
export async function startKubeletNodeWith(config: Config, token: string, logger: Logger, kube?: KubeApi, metrics?: Registry): Promise<KubeletNode> {
  const agent = createNodeAgent(config, logger, {
    internalToken: token,
    ...(metrics ? { metrics } : {}),
    hostScope: hostScopeOf(config),
    ...(config.SPACE_NODE_RUNTIME_STATE_DIR ? { runtimeStateDir: config.SPACE_NODE_RUNTIME_STATE_DIR } : {}),
    progress: false,
  });
  await agent.start();
  let kubelet: VirtualKubelet | undefined;
  try {
    const listening = await agent.app.listen({ host: config.SPACE_NODE_HOST, port: config.SPACE_NODE_PORT });
    const nodeApiUrl = config.SPACE_NODE_ADVERTISE_URL || listening;
    kubelet = new VirtualKubelet({
      kube: kube ?? createKubeApi(kubeConnectionOf(config)),
      agent,
      identity: { name: agent.nodeId!, nodeGroup: config.SPACE_NODE_GROUP, labels: parseSelector(config.SPACE_NODE_LABELS), nodeApiUrl },
      address: new URL(nodeApiUrl).hostname,
      version: VERSION,
      heartbeatMs: config.SPACE_NODE_HEARTBEAT_MS,
      log: logger.child({ component: "kubelet" }),
    });
    await kubelet.start();
  } catch (e) {
    await kubelet?.stop().catch(() => {});
    await agent.stop().catch(() => {});
    throw e;
  }
  logger.info({ nodeId: agent.nodeId, node: kubelet.nodeName }, "node up (kubernetes)");
  const k = kubelet;
  return {
    agent,
    kubelet: k,
    async stop() {
      await k.stop();
      await agent.stop();
    },
  };
}

export async function startKubeletNode(config: Config, token: string, logger: Logger, metrics?: Registry): Promise<() => Promise<void>> {
  const n = await startKubeletNodeWith(config, token, logger, undefined, metrics);
  process.stdout.write(`SPACE node ${n.agent.nodeId} is up as Kubernetes node ${n.kubelet.nodeName}\n`);
  return () => n.stop();
}
