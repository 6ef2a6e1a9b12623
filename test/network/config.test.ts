/** The operator's network settings: validated at startup, naming the bad value. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../../src/core/config.ts";
import { upstreamFromConfig } from "../../src/node/dns/resolver.ts";

test("SPACE_NODE_DNS_UPSTREAM: ip or ip:port, empty = resolv.conf", () => {
  assert.equal(upstreamFromConfig(loadConfig({}).SPACE_NODE_DNS_UPSTREAM), undefined);
  assert.deepEqual(upstreamFromConfig(loadConfig({ SPACE_NODE_DNS_UPSTREAM: "198.18.0.53" }).SPACE_NODE_DNS_UPSTREAM), { host: "198.18.0.53", port: 53 });
  assert.deepEqual(upstreamFromConfig(loadConfig({ SPACE_NODE_DNS_UPSTREAM: "10.0.0.2:5353" }).SPACE_NODE_DNS_UPSTREAM), { host: "10.0.0.2", port: 5353 });
  for (const bad of ["dns.example", "10.0.0.2:0", "10.0.0.2:70000", "10.0.0.256", "10.0.0.2:53:1"]) {
    assert.throws(() => loadConfig({ SPACE_NODE_DNS_UPSTREAM: bad }), (e: unknown) => e instanceof ConfigError && e.message.includes(`SPACE_NODE_DNS_UPSTREAM=${JSON.stringify(bad)}`), bad);
  }
});

test("SPACE_NODE_GUARDRAILS / _EXCEPTIONS: comma-separated IPv4/CIDRs, every bad one named", () => {
  const c = loadConfig({ SPACE_NODE_GUARDRAILS: "10.0.0.5, 192.168.0.0/16", SPACE_NODE_GUARDRAIL_EXCEPTIONS: "169.254.169.254" });
  assert.deepEqual(c.SPACE_NODE_GUARDRAILS, ["10.0.0.5", "192.168.0.0/16"]);
  assert.deepEqual(c.SPACE_NODE_GUARDRAIL_EXCEPTIONS, ["169.254.169.254"]);
  assert.deepEqual(loadConfig({}).SPACE_NODE_GUARDRAILS, []);
  assert.throws(
    () => loadConfig({ SPACE_NODE_GUARDRAILS: "10.0.0.0/33", SPACE_NODE_GUARDRAIL_EXCEPTIONS: "metadata.internal" }),
    (e: unknown) => e instanceof ConfigError && e.message.includes('SPACE_NODE_GUARDRAILS="10.0.0.0/33"') && e.message.includes('SPACE_NODE_GUARDRAIL_EXCEPTIONS="metadata.internal"'),
  );
});
