/**
 * Boot a stopped sandbox again on its node. The Substrate seam has `stop` but no
 * "start a stopped sandbox" verb yet (its `start` creates from a spec), while node-api
 * has `POST /v1/sandboxes/:id/start`. Until the substrate grows that verb (asked of the
 * substrate owner), this module reaches the node through the substrate's own proxy
 * target: the node's origin and the header that authenticates the control plane.
 * A substrate that implements `restart(ref, signal)` itself is used instead.
 */
import { SpaceError } from "../core/errors.ts";
import { toNodeError } from "../substrate/direct/node-client.ts";
import { ENVD_PORT, SandboxStatus } from "../contract/node-api.ts";
import type { SandboxRef, Substrate } from "../substrate/substrate.ts";

type WithRestart = Substrate & { restart(ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus> };

export async function restartStopped(substrate: Substrate, ref: SandboxRef, signal: AbortSignal): Promise<SandboxStatus> {
  if (typeof (substrate as Partial<WithRestart>).restart === "function") return (substrate as WithRestart).restart(ref, signal);
  const target = await substrate.proxyTarget(ref, ENVD_PORT, signal);
  const url = `${target.baseUrl.origin}/v1/sandboxes/${encodeURIComponent(ref.sandboxId)}/start`;
  let res: Response;
  try {
    res = await fetch(url, {
      method: "POST",
      headers: { ...target.headers, "content-type": "application/json" },
      body: "{}",
      signal: AbortSignal.any([signal, AbortSignal.timeout(300_000)]),
    });
  } catch (e) {
    throw new SpaceError("unavailable", `node of sandbox ${ref.sandboxId} unreachable for start: ${(e as Error).message}`, { cause: e });
  }
  const text = await res.text();
  if (!res.ok) throw toNodeError(res.status, text, `POST /v1/sandboxes/${ref.sandboxId}/start`);
  const r = SandboxStatus.safeParse(JSON.parse(text));
  if (!r.success) throw new SpaceError("internal", `node answered start with an unexpected body: ${text.slice(0, 200)}`);
  return r.data;
}
