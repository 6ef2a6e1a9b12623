import assert from "node:assert/strict";
import { test } from "node:test";
import { SpaceError } from "../core/errors.ts";
import { domainMatches } from "../contract/egress-policy.ts";
import { addSlotScript, bindScript, setPolicyScript } from "../node/network/nft.ts";
import { parseAnswers, buildAnswer, buildQuery, parseQuestion } from "../node/dns/wire.ts";
import { compileEcw, compileNative, egressPolicyOf } from "./egress-rules.ts";

test("ECW: allow_internet_access=false ≡ denyOut 0.0.0.0/0; allowOut entries are exceptions placed first", () => {
  assert.deepEqual(compileEcw(false, null), { default: "deny", rules: [] });
  assert.deepEqual(compileEcw(true, { denyOut: ["0.0.0.0/0"] }), { default: "deny", rules: [] });
  const p = compileEcw(true, { allowOut: ["1.1.1.1", "8.8.8.0/24", "Example.com.", "*.api.dev"], denyOut: ["0.0.0.0/0"] });
  assert.equal(p.default, "deny");
  assert.deepEqual(p.rules.map((r) => [r.action, r.cidr ?? r.domain, r.protocol, r.ports]), [
    ["allow", "1.1.1.1/32", "any", undefined],
    ["allow", "8.8.8.0/24", "any", undefined],
    ["allow", "example.com", "tcp", [[80, 80], [443, 443]]],
    ["allow", "*.api.dev", "tcp", [[80, 80], [443, 443]]],
  ]);
  assert.deepEqual(compileEcw(true, { denyOut: ["10.0.0.0/8"] }).rules, [{ action: "deny", cidr: "10.0.0.0/8", protocol: "any" }]);
});

test("ECW: a domain in denyOut and garbage entries are 400s", () => {
  assert.throws(() => compileEcw(true, { denyOut: ["example.com"] }), (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && /denyOut/.test(e.message));
  assert.throws(() => compileEcw(true, { allowOut: ["not a host"] }), (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument");
  assert.throws(() => compileEcw(true, { allowOut: ["10.0.0.0/33"] }), SpaceError);
});

test("Native v1: every deny precedes every allow; ports and ranges; default", () => {
  const p = compileNative({
    rules: [
      { action: "allow", target: "10.0.0.0/8", protocol: "tcp", ports: [443, "8000-8100"] },
      { action: "deny", target: "10.1.2.3", protocol: "any" },
    ],
    allow_internet_access: false,
  });
  assert.equal(p.default, "deny");
  assert.deepEqual(p.rules.map((r) => r.action), ["deny", "allow"]);
  assert.deepEqual(p.rules[1]!.ports, [[443, 443], [8000, 8100]]);
  assert.throws(() => compileNative({ rules: [{ action: "allow", target: "x", protocol: "tcp", ports: ["90-80"] }] }), SpaceError);
  assert.deepEqual(egressPolicyOf(false, { spacePolicy: compileNative({ allow_out: ["1.2.3.4"] }) }).default, "deny");
});

test("wildcards match subdomains at any depth, never the apex", () => {
  assert.ok(domainMatches("*.example.com", "a.example.com"));
  assert.ok(domainMatches("*.example.com", "a.b.EXAMPLE.com."));
  assert.ok(!domainMatches("*.example.com", "example.com"));
  assert.ok(!domainMatches("*.example.com", "badexample.com"));
  assert.ok(domainMatches("example.com", "Example.COM"));
});

test("nft: slot chain is first-match with generation marks; domain sets are declared, swapped and bound atomically", () => {
  const p = compileEcw(false, { allowOut: ["example.com", "1.2.3.0/24"] });
  const s = addSlotScript("t", "abc", "10.0.0.2", p, 7);
  assert.match(s, /add set inet t sb_abc_0 \{ type ipv4_addr; flags timeout; \}/);
  assert.match(s, /ct state established,related ct mark 7 accept/);
  assert.match(s, /ip daddr @sb_abc_0 meta l4proto tcp th dport \{ 80, 443 \} ct mark set 7 accept/);
  assert.match(s, /ip daddr 1\.2\.3\.0\/24 ct mark set 7 accept/);
  assert.match(s, /add rule inet t sb_abc counter reject\n/);
  const u = setPolicyScript("t", "abc", compileEcw(true, null), p, 8);
  assert.match(u, /delete set inet t sb_abc_0/);
  assert.match(u, /ct mark set 8 accept/);
  assert.match(bindScript("t", "abc", 0, ["9.9.9.9"], 0.2), /9\.9\.9\.9 timeout 1s/);
});

test("dns wire: question and A answers round-trip", () => {
  const q = buildQuery(42, "api.example.com");
  assert.deepEqual(parseQuestion(q), { id: 42, name: "api.example.com", type: 1, cls: 1 });
  const a = buildAnswer(q, ["1.2.3.4", "5.6.7.8"], 30);
  assert.deepEqual(parseAnswers(a), [
    { name: "api.example.com", address: "1.2.3.4", ttl: 30 },
    { name: "api.example.com", address: "5.6.7.8", ttl: 30 },
  ]);
  assert.equal(buildAnswer(q, undefined).readUInt16BE(2) & 15, 3);
});
