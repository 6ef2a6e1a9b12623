/**
 * Network policy bench: added latency of egress enforcement and of domain resolution
 * through the node resolver, against the test "internet" namespace (nothing leaves the
 * machine). Run as root: `node --import tsx bench/network.ts`.
 *   - TCP connect (N=500) and 1,000 small HTTP requests (new connection each), from a slot
 *     with the open policy vs a 200-rule policy (the target matched by the last rule), and
 *     HTTP through the egress proxy (a policy with a domain rule: port 80 is redirected and
 *     judged by its Host header)
 *   - DNS A lookups (N=300): node resolver (with a domain binding) vs the upstream direct
 *   - policy update (setPolicy) latency for 1, 100 and 1,000 rules
 */
import { compileEcw } from "../src/sandboxes/egress-rules.ts";
import { OPEN_POLICY, type EgressPolicy } from "../src/contract/egress-policy.ts";
import { INET, probe, startRig } from "../test/network/harness.ts";
import { median } from "./support/stats.ts";

const rig = await startRig();
const results: Record<string, unknown> = {};
const parse = (s: string) => JSON.parse(s) as { medianUs: number; p99Us: number; totalMs: number };
try {
  const deny = Array.from({ length: 198 }, (_, i) => `10.${100 + (i >> 8)}.${i & 255}.0/24`);
  const big: EgressPolicy = compileEcw(true, { allowOut: [...Array.from({ length: 199 }, (_, i) => `172.16.${i}.0/24`), "198.18.1.0/24"], denyOut: [...deny, "0.0.0.0/0"] });
  const open = await rig.claim(OPEN_POLICY);
  const filtered = await rig.claim(big);
  const proxied = await rig.claim(compileEcw(true, { allowOut: ["198.18.1.0/24", "bench.test"], denyOut: ["0.0.0.0/0"] }));
  for (const [label, slot] of [["open", open], ["policy200", filtered], ["domain_rule_proxied", proxied]] as const) {
    const [tcp, http] = await probe(slot.netns, [
      { kind: "bench", what: "tcp", host: INET.a1, port: 5000, n: 500 },
      { kind: "bench", what: "http", host: INET.a1, port: 80, n: 1000 },
    ]);
    results[`tcp_connect_${label}`] = parse(tcp!);
    results[`http_1000_${label}`] = parse(http!);
  }
  results.proxy_connections = { ...rig.proxy.stats };
  // DNS: through the node resolver (binding allowed.test for a domain rule) vs upstream direct.
  const dnsSlot = await rig.claim(compileEcw(false, { allowOut: ["allowed.test"] }));
  const [viaNode] = await probe(dnsSlot.netns, [{ kind: "bench", what: "dns", host: rig.gateway, port: 53, n: 300, name: "allowed.test" }]);
  results.dns_via_node_resolver_bound = parse(viaNode!);
  const [viaNodeUnbound] = await probe(dnsSlot.netns, [{ kind: "bench", what: "dns", host: rig.gateway, port: 53, n: 300, name: "other.test" }]);
  results.dns_via_node_resolver_unbound = parse(viaNodeUnbound!);
  // The unfiltered path: the upstream asked directly from an unrestricted namespace (the node's).
  const [direct] = await probe("spnet-inet", [{ kind: "bench", what: "dns", host: INET.dns, port: 53, n: 300, name: "allowed.test" }]);
  results.dns_upstream_direct = parse(direct!);
  for (const n of [1, 100, 1000]) {
    const p = compileEcw(true, { allowOut: Array.from({ length: n }, (_, i) => `172.${16 + (i >> 8)}.${i & 255}.0/24`), denyOut: ["0.0.0.0/0"] });
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      const t = performance.now();
      await rig.slots.setPolicy(filtered.owner, i % 2 ? p : OPEN_POLICY, AbortSignal.timeout(30_000));
      times.push(performance.now() - t);
    }
    results[`policy_update_${n}_rules_ms`] = { median: +median(times).toFixed(1), max: +Math.max(...times).toFixed(1) };
  }
} finally {
  await rig.close();
}
console.log(JSON.stringify(results, null, 2));
