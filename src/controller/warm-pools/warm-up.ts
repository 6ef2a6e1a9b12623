/**
 * Warm-up of a fresh pool member before it is offered: an empty `/init` and one trivial
 * command in the shape the e2b SDK sends (`/bin/bash -l -c …`) through the node's proxy
 * into envd. A new
 * member's envd has never served a process start (its Node.js code paths are not yet
 * compiled) and its own disk snapshot has not read bash, libc or the login profile into
 * the page cache; without this the adopter's first command pays for both. The member
 * is not personalised yet, so nothing the command does is visible to the adopter beyond
 * a warmer cache.
 */
import type { Logger } from "../../core/log.ts";
import { ENVD_PORT } from "../../contract/node-api.ts";
import type { SandboxRef, Substrate } from "../../substrate/substrate.ts";
import { envdHeaders, fromConnectError, processClient } from "../../operations/envd-process-client.ts";

/** Readies a started member for its first adopter; resolves when done (never rejects). */
export interface MemberWarmer {
  /** `accessToken`: the member's envd token (null: it has none). */
  warm(ref: SandboxRef, accessToken: string | null, signal: AbortSignal): Promise<void>;
}

const WARM_UP_TIMEOUT_MS = 10_000;

export class EnvdWarmer implements MemberWarmer {
  constructor(
    private readonly substrate: Pick<Substrate, "proxyTarget">,
    private readonly log: Logger,
  ) {}

  async warm(ref: SandboxRef, accessToken: string | null, signal: AbortSignal): Promise<void> {
    const t0 = performance.now();
    const s = AbortSignal.any([signal, AbortSignal.timeout(WARM_UP_TIMEOUT_MS)]);
    try {
      const target = await this.substrate.proxyTarget(ref, ENVD_PORT, s);
      const auth = { accessToken };
      // An empty /init changes nothing; it compiles the path adoption's personalisation takes.
      const init = await fetch(`${target.baseUrl.href}/init`, {
        method: "POST",
        headers: { ...envdHeaders(target, auth), "content-type": "application/json" },
        body: "{}",
        signal: s,
      });
      await init.arrayBuffer();
      const client = processClient(target, auth);
      for await (const _ of client.start({ process: { cmd: "/bin/bash", args: ["-l", "-c", "true"], envs: {} }, stdin: false }, { signal: s })) {
        // drained: the stream ends with the process
      }
      this.log.debug({ sandboxId: ref.sandboxId, ms: Math.round(performance.now() - t0) }, "warm member warmed up");
    } catch (e: unknown) {
      // A template without bash still serves; adoption's personalisation catches a broken envd.
      this.log.info({ sandboxId: ref.sandboxId, err: fromConnectError(e, "warm-up command") }, "warm member warm-up failed; offering it anyway");
    }
  }
}
