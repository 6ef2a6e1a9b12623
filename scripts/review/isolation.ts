/**
 * Area b, isolation probes from inside sandboxes (what test/e2e/hardening.test.ts and the
 * network suites probe, gathered in isolation-probe.py): another sandbox's envd, the
 * host's addresses and the node's ports, metadata addresses, raw sockets, mounts and
 * namespaces, /proc and /sys writes, devices, capabilities, ptrace and signals to PID 1.
 * Run as root and as `user` in one sandbox; every probe must be refused.
 */
import { readFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { createEcw, killEcw, shell } from "./clients.ts";
import { Tally, type AreaResult } from "./report.ts";
import type { ReviewStack } from "./review-stack.ts";

const PROBE = readFileSync(new URL("./isolation-probe.py", import.meta.url), "utf8");

export async function isolation(stack: ReviewStack): Promise<AreaResult> {
  const started = Date.now();
  const t = new Tally();
  t.measure("tried", "notRefused");
  const ep = stack.ep;
  const [a, b] = await Promise.all([createEcw(ep), createEcw(ep)]);
  try {
    const ipOf = async (id: string) => (await shell(ep, id, `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('10.255.255.1', 9)); print(s.getsockname()[0])"`)).out.trim();
    const ipB = await ipOf(b.sandboxID);
    const gateway = (await shell(ep, a.sandboxID, `awk '$2=="00000000"{print $3}' /proc/net/route | head -1`)).out.trim();
    const gw = gateway.length === 8 ? [6, 4, 2, 0].map((i) => parseInt(gateway.slice(i, i + 2), 16)).join(".") : "";
    const ports = [stack.env.SPACE_API_PORT, stack.env.SPACE_NODE_PORT, stack.env.SPACE_GATEWAY_PORT].map(Number);
    const hostAddrs = Object.values(networkInterfaces())
      .flat()
      .filter((i) => i && !i.internal && i.family === "IPv4")
      .map((i) => i!.address)
      .filter((ip) => ip !== ipB);
    const tcp: Array<[string, number]> = [
      [ipB, 49983],
      [ipB, 22],
      ...(gw ? ports.map((p) => [gw, p] as [string, number]) : []),
      ...(gw ? ([[gw, 22]] as Array<[string, number]>) : []),
      ["169.254.169.254", 80],
      ["100.100.100.200", 80],
      ["fd00:ec2::254", 80],
      ...hostAddrs.slice(0, 6).flatMap((ip) => ports.slice(0, 2).map((p) => [ip, p] as [string, number])),
    ];
    await shell(ep, a.sandboxID, `cat > /tmp/isolation-probe.py <<'PROBE'\n${PROBE}\nPROBE\nchmod 644 /tmp/isolation-probe.py`);
    const cfg = JSON.stringify({ tcp, hostPath: stack.dataDir }).replaceAll("'", "");
    for (const user of ["root", "user"]) {
      const r = await shell(ep, a.sandboxID, `python3 /tmp/isolation-probe.py '${cfg}'`, user);
      let res: Record<string, string>;
      try {
        res = JSON.parse(r.out.trim().split("\n").pop() ?? "") as Record<string, string>;
      } catch {
        t.findings.push(`the probe script as ${user} printed no JSON: ${r.out.slice(-300)}`);
        continue;
      }
      for (const [name, v] of Object.entries(res)) {
        t.add("tried");
        if (v !== "refused") t.find("notRefused", `as ${user}: ${name}: ${v}`);
      }
    }
    // The sandbox's envd is unharmed by it all.
    const alive = await shell(ep, a.sandboxID, "echo alive");
    if (alive.out.trim() !== "alive") t.findings.push(`after the probes the sandbox answers ${alive.out.slice(0, 100)}`);
  } finally {
    await Promise.all([killEcw(ep, a.sandboxID), killEcw(ep, b.sandboxID)]);
  }
  return t.result("isolation", "b. isolation probes", started);
}
