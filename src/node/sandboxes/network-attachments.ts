/**
 * The seam the sandbox manager uses for a sandbox's network: where the sandbox is reached,
 * which network namespace it joins, its egress policy and the network identity written
 * into its root filesystem. Implementations: a network slot per sandbox (SlotAttachments,
 * over node/network/slots.ts: the OCI runtimes) and the host's own network
 * (HostAttachments: the process runtime). The node agent picks one where it builds the manager.
 */
import { readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import type { EgressPolicy, NetworkRecord } from "../../contract/egress-policy.ts";
import type { NetworkSlots } from "../network/slots.ts";
import { resolveInRoot } from "../templates/rootfs-fs.ts";

export interface Attachment {
  address: string;
  /** Where envd listens at `address`; absent = envd's own port (the sandbox has the address to itself). */
  envdPort?: number;
  /** The network namespace the runtime joins; absent = the host's. */
  netnsPath?: string;
}

export interface NetworkAttachments {
  /**
   * Resolves once the sandbox can be started in its network; `configured` settles once that
   * is fully set up (see NetworkSlots.open). Exists = ok.
   */
  open(sandboxId: string, policy: EgressPolicy, signal: AbortSignal): Promise<{ attachment: Attachment; configured: Promise<void> }>;
  /** Absent = ok. `keep`: the sandbox may come back here at once (NetworkSlots.release). */
  release(sandboxId: string, signal: AbortSignal, o?: { keep?: boolean }): Promise<void>;
  /** The egress policy of an attached sandbox; not attached (stopped) = applied at the next open. */
  setPolicy(sandboxId: string, policy: EgressPolicy, signal: AbortSignal): Promise<void>;
  /** Destinations recorded for the sandbox (observe mode) and refused by its policy; none when not attached. */
  record(sandboxId: string, signal: AbortSignal): Promise<NetworkRecord>;
  /** hosts, hostname and resolv.conf of the sandbox's root filesystem, before it boots. */
  writeIdentity(sandboxId: string, address: string, rootfs: string): Promise<void>;
}

const nothingRecorded = (): NetworkRecord => ({ observed: [], denied: [] });

/** A network slot per sandbox: its own namespace, address, nft policy and the node resolver. */
export class SlotAttachments implements NetworkAttachments {
  private readonly slots: NetworkSlots;

  constructor(slots: NetworkSlots) {
    this.slots = slots;
  }

  async open(sandboxId: string, policy: EgressPolicy, signal: AbortSignal): Promise<{ attachment: Attachment; configured: Promise<void> }> {
    const { slot, configured } = await this.slots.open(sandboxId, policy, signal);
    return { attachment: { address: slot.address, netnsPath: slot.netnsPath }, configured };
  }

  release(sandboxId: string, signal: AbortSignal, o?: { keep?: boolean }): Promise<void> {
    return this.slots.release(sandboxId, signal, o);
  }

  async setPolicy(sandboxId: string, policy: EgressPolicy, signal: AbortSignal): Promise<void> {
    if (this.slots.get(sandboxId)) await this.slots.setPolicy(sandboxId, policy, signal);
  }

  async record(sandboxId: string, signal: AbortSignal): Promise<NetworkRecord> {
    if (!this.slots.observed || !this.slots.get(sandboxId)) return nothingRecorded();
    return this.slots.observed(sandboxId, signal);
  }

  /**
   * Each file is replaced, never written through: a template's /etc (or a file in it) may be
   * a symlink, and it resolves within the rootfs.
   */
  async writeIdentity(sandboxId: string, address: string, rootfs: string): Promise<void> {
    // A loopback resolver of the node is unreachable (and refused) from a sandbox. With a
    // network slot, the node resolver on the slot gateway is the only DNS a sandbox reaches.
    const gateway = this.slots.get(sandboxId)?.gateway;
    const resolv = gateway
      ? `nameserver ${gateway}\n`
      : (await readFile("/etc/resolv.conf", "utf8").catch(() => ""))
          .split("\n")
          .filter((l) => !/^nameserver\s+(127\.|::1)/.test(l))
          .join("\n");
    const etc = await resolveInRoot(rootfs, "/etc");
    const files: Array<[string, string]> = [
      ["hosts", `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n${address}\t${sandboxId}\n`],
      ["hostname", `${sandboxId}\n`],
      ["resolv.conf", resolv],
    ];
    await Promise.all(
      files.map(async ([name, text]) => {
        const p = join(etc, name);
        await rm(p, { force: true });
        await writeFile(p, text, { flag: "wx" });
      }),
    );
  }
}

/**
 * The process runtime's network: the host's, shared by every sandbox. A sandbox is
 * reached on loopback, its envd on a free port; there is no policy to apply, nothing is
 * recorded, and its processes read the host's /etc.
 */
export class HostAttachments implements NetworkAttachments {
  async open(): Promise<{ attachment: Attachment; configured: Promise<void> }> {
    return { attachment: { address: "127.0.0.1", envdPort: await freePort() }, configured: Promise.resolve() };
  }
  async release(): Promise<void> {}
  async setPolicy(): Promise<void> {}
  async record(): Promise<NetworkRecord> {
    return nothingRecorded();
  }
  async writeIdentity(): Promise<void> {}
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const a = srv.address();
      srv.close(() => (a && typeof a === "object" ? resolve(a.port) : reject(new Error("no port"))));
    });
    srv.on("error", reject);
  });
}
