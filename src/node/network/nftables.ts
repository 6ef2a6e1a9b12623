/**
 * Runs nft scripts: through libnftables in this process (native/nftables.c) when its addon
 * is built and the library loads, else as `nft -f -`. Each script is one transaction either
 * way. The library's calls run one at a time, queued here so that waiting ones do not hold
 * threads of libuv's pool (file operations share it).
 */
import { loadNodeAddon } from "../../core/addons.ts";
import { exec } from "../../core/exec.ts";

interface NftablesAddon {
  available: boolean;
  run(script: string, netns: string | null): Promise<void>;
}

let addon: NftablesAddon | null | undefined;
let tail: Promise<unknown> = Promise.resolve();

/** Runs `script` (in the network namespace whose file is `netns`, when given); rejects with nft's message. */
export function runNft(script: string, o: { signal: AbortSignal; timeoutMs: number; netns?: string }): Promise<void> {
  addon ??= loadNodeAddon<NftablesAddon>("nftables") ?? null;
  if (!addon?.available) {
    return exec("nft", ["-f", "-"], { timeoutMs: o.timeoutMs, signal: o.signal, input: script, ...(o.netns ? { namespaces: { net: o.netns } } : {}) }).then(() => undefined);
  }
  const lib = addon;
  const run = tail.then(() => {
    o.signal.throwIfAborted();
    return lib.run(script, o.netns ?? null);
  });
  tail = run.catch(() => undefined);
  return run;
}
