/**
 * Area a, malformed input: schemathesis on the Native and Admin OpenAPI documents (the
 * venv of scripts/setup/schemathesis.sh, invoked as test/e2e/schemathesis.test.ts does),
 * then a generated corpus of hand-made cases on ECW REST, Native, envd's Connect RPCs and
 * envd's HTTP files API: NUL bytes, unpaired surrogates, huge sizes, wrong types, garbage
 * protobuf, truncated Connect frames, path traversal (`../`, absolute, symlink escapes as
 * `user`), wrong methods. Counts inputs, 5xx and internal text in answers; a traversal
 * that reads what `user` may not read is "not refused".
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createEcw, envdHeaders, killAll, killEcw, newApiKey, newTenant, shell, type EcwSandbox } from "./clients.ts";
import { probe, type Req } from "./probe-http.ts";
import { Tally, type AreaResult } from "./report.ts";
import type { ReviewStack } from "./review-stack.ts";

export interface MalformedOptions {
  quick: boolean;
}

const NUL = '"a\\u0000b"';
const SURROGATE = '"\\ud800"';
const HUGE = (n: number) => JSON.stringify("x".repeat(n));
/** JSON texts of the wrong shape for most fields (raw, so NUL and surrogates go over the wire as escapes). */
const BAD_VALUES = [NUL, SURROGATE, HUGE(1 << 20), "1e309", "-1", "0", "12.5", "true", "[]", "[1,2]", '{"a":{"b":{"c":[]}}}', `"${"../".repeat(50)}etc/passwd"`, '"/etc/shadow"'];
const BAD_IDS = ["%00", "..%2F..%2Fetc%2Fpasswd", "%2E%2E", "a".repeat(5000), "%ED%A0%80", "%FF%FE", "%20", "sbx%0Aset-cookie:x", "nosuchsandbox00000000"];
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"];

export async function malformed(stack: ReviewStack, o: MalformedOptions): Promise<AreaResult> {
  const started = Date.now();
  const t = new Tally();
  t.measure("tried", "serverErrors", "leakedText", "notRefused");
  const ep = stack.ep;
  const internal = [stack.dataDir, resolve(".")];
  const sb = await createEcw(ep);
  try {
    const reqs = [...restCorpus(ep.apiUrl, ep.apiKey, sb.sandboxID, o.quick), ...envdCorpus(ep.sandboxUrl, sb, o.quick)];
    let queued = 0;
    for (const r of reqs) {
      const a = await probe(t, r, internal);
      // An input valid by chance made a sandbox: kill it now, so the corpus never fills the node (507).
      if (a.status === 201 && /"sandboxID":"([a-z0-9]+)"/.test(a.text)) await killEcw(ep, /"sandboxID":"([a-z0-9]+)"/.exec(a.text)![1]!);
      if (a.status === 202 && r.url.endsWith("/v1/sandboxes") && ++queued % 10 === 0) await killAll(ep, 30_000, [sb.sandboxID]);
    }
    await killAll(ep, 60_000, [sb.sandboxID]);
    await traversal(t, stack, sb, internal);
  } finally {
    await killEcw(ep, sb.sandboxID);
  }
  // Inputs that happened to be valid made sandboxes: gone before the Admin fuzzing may lock the tenant out.
  await killAll(ep);
  // The fuzzer learns key and token ids from GET /v1/api-keys and may revoke every key of the
  // tenant it runs as (its own included): a tenant of its own, cleaned up with a key made after.
  const fuzzed = await newTenant(ep, `review-st-${Date.now()}`);
  schemathesis(t, `${ep.apiUrl}/v1/openapi.json`, fuzzed.apiKey, o.quick, []);
  await killAll({ ...ep, apiKey: await newApiKey(ep, fuzzed.tenantId, "review-st-cleanup") });
  await killAll(ep);
  // Admin last: it may disable the tenant and revoke the keys the rest of the review uses (main.ts makes new ones).
  schemathesis(t, `${ep.apiUrl}/admin/api/v1/openapi.json`, ep.adminToken, o.quick, ["--exclude-method", "PUT"]);
  return t.result("malformed", "a. malformed input", started);
}

/** One bounded schemathesis run: its generated cases are inputs, ST101 failures are 5xx, other failures are findings. */
function schemathesis(t: Tally, doc: string, bearer: string, quick: boolean, extra: string[]): void {
  const venv = process.env.SPACE_SCHEMATHESIS_VENV ?? resolve(".tools/schemathesis");
  const st = join(venv, "bin", "st");
  if (!existsSync(st)) {
    t.findings.push(`schemathesis not run on ${doc}: no ${st} (bash scripts/setup/schemathesis.sh)`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "space-review-st-"));
  const json = join(dir, "report.json");
  const r = spawnSync(
    st,
    [
      "run", doc,
      "--header", `Authorization: Bearer ${bearer}`,
      "--checks", "not_a_server_error,response_schema_conformance",
      "--phases", quick ? "examples,fuzzing" : "examples,coverage,fuzzing",
      "--max-examples", quick ? "3" : "30",
      "--max-time", quick ? "25" : "90",
      // One worker: hypothesis describing lambdas in threads trips CPython 3.11's ast (SystemError).
      "--workers", "1",
      "--request-timeout", "40",
      "--no-color",
      "--report", "json", "--report-json-path", json,
      ...extra,
    ],
    { encoding: "utf8", timeout: 300_000, cwd: dir },
  );
  if (!existsSync(json)) {
    rmSync(dir, { recursive: true, force: true });
    t.findings.push(`schemathesis wrote no report for ${doc} (exit ${r.status}): ${`${r.stdout}${r.stderr}`.slice(-300)}`);
    return;
  }
  const text = readFileSync(json, "utf8");
  rmSync(dir, { recursive: true, force: true });
  const report = JSON.parse(text) as { test_cases: { generated: number }; operations: { errored: number }; failures: { code: string; title: string; count: number; operations: string[] }[] };
  t.add("tried", report.test_cases.generated);
  for (const f of report.failures) {
    if (f.code === "ST101") t.find("serverErrors", `schemathesis ${doc}: ${f.count} × ${f.title} on ${f.operations.join(", ")}`);
    else t.findings.push(`schemathesis ${doc}: ${f.count} × ${f.code} ${f.title} on ${f.operations.join(", ")}`);
  }
  if (report.operations.errored) t.findings.push(`schemathesis ${doc}: ${report.operations.errored} operations errored`);
}

/** ECW and Native REST: every route × wrong ids and methods, create bodies with each field wrong, raw bodies, queries. */
function restCorpus(api: string, apiKey: string, id: string, quick: boolean): Req[] {
  const ecw = { "x-api-key": apiKey };
  const native = { authorization: `Bearer ${apiKey}` };
  const json = { "content-type": "application/json" };
  const out: Req[] = [];
  const ecwRoutes = ["/sandboxes/:id", "/sandboxes/:id/connect", "/sandboxes/:id/fork", "/sandboxes/:id/logs", "/sandboxes/:id/metrics", "/sandboxes/:id/network", "/sandboxes/:id/pause", "/sandboxes/:id/refreshes", "/sandboxes/:id/resume", "/sandboxes/:id/snapshots", "/sandboxes/:id/timeout", "/v2/sandboxes/:id/connect", "/v2/sandboxes/:id/logs", "/templates/:id", "/templates/:id/tags", "/templates/aliases/:id"];
  const nativeRoutes = ["/v1/sandboxes/:id", "/v1/sandboxes/:id/network", "/v1/sandboxes/:id/commands", "/v1/sandboxes/:id/commands/:id", "/v1/sandboxes/:id/commands/:id/output", "/v1/sandboxes/:id/commands/:id/cancel", "/v1/sandboxes/:id/stop", "/v1/sandboxes/:id/fork", "/v1/operations/:id", "/v1/templates/:id", "/v1/templates/:id/builds"];
  const ids = quick ? BAD_IDS.slice(0, 4) : BAD_IDS;
  for (const [routes, auth] of [[ecwRoutes, ecw], [nativeRoutes, native]] as const) {
    for (const route of routes) {
      for (const bad of ids) for (const method of quick ? ["GET", "POST"] : METHODS) out.push({ what: `bad id ${bad.slice(0, 20)}`, method, url: api + route.replaceAll(":id", bad), headers: { ...auth, ...json }, body: "{}" });
      // Wrong methods and bodies on the real sandbox (never a real kill or pause: those ids are bad).
      for (const method of ["PUT", "PATCH"]) out.push({ what: "wrong method", method, url: api + route.replaceAll(":id", id), headers: { ...auth, ...json }, body: "{}" });
    }
  }
  const fields: Record<string, string[]> = {
    "/sandboxes": ["templateID", "timeout", "metadata", "envVars", "autoPause", "secure", "allow_internet_access", "network", "autoResume", "mcp"],
    "/v1/sandboxes": ["template", "timeout_s", "metadata", "env", "network", "resources", "auto_pause"],
  };
  for (const [path, names] of Object.entries(fields)) {
    const auth = path.startsWith("/v1") ? native : ecw;
    const base = path.startsWith("/v1") ? '"template":"base"' : '"templateID":"base"';
    for (const f of names) {
      for (const v of quick ? BAD_VALUES.slice(0, 6) : BAD_VALUES) {
        // A value that happens to be valid creates a sandbox: a tiny timeout bounds it.
        const body = f === "templateID" || f === "template" ? `{"${f}":${v}}` : `{${base},"${f}":${v}}`;
        out.push({ what: `${path} ${f}=${v.slice(0, 20)}`, method: "POST", url: api + path, headers: { ...auth, ...json }, body });
        if (!["metadata", "envVars", "env"].includes(f)) continue;
        out.push({ what: `${path} ${f} entry=${v.slice(0, 20)}`, method: "POST", url: api + path, headers: { ...auth, ...json }, body: `{${base},"${f}":{"K":${v}}}` });
      }
    }
    const raws: Array<[string, string | Uint8Array, string]> = [
      ["empty", "", "application/json"],
      ["null", "null", "application/json"],
      ["truncated", `{${base},"metadata":{"a":`, "application/json"],
      ["array", "[]", "application/json"],
      ["string", '"x"', "application/json"],
      ["invalid UTF-8", new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]), "application/json"],
      ["NUL byte", "{\u0000}", "application/json"],
      ["form", "templateID=base", "application/x-www-form-urlencoded"],
      ["text", "hello", "text/plain"],
      ["deep", `${"[".repeat(20000)}${"]".repeat(20000)}`, "application/json"],
      ["17 MiB", `{${base},"metadata":{"a":${HUGE(17 << 20)}}}`, "application/json"],
    ];
    for (const [what, body, ct] of quick ? raws.slice(0, 8) : raws) out.push({ what: `${path} raw ${what}`, method: "POST", url: api + path, headers: { ...auth, "content-type": ct }, body, resetOk: what === "17 MiB" });
  }
  const queries = ["/v2/sandboxes?metadata=a%3D%2500", "/v2/sandboxes?limit=-1", "/v2/sandboxes?limit=abc", "/v2/sandboxes?limit=1e309", "/v2/sandboxes?nextToken=%FF%FE", "/v2/sandboxes?state=bogus", "/v2/sandboxes?metadata=%ED%A0%80", "/sandboxes?metadata=" + "a%3Db%26".repeat(3000), "/v1/sandboxes?cursor=zzz", "/v1/sandboxes?limit=0", "/v1/sandboxes?state=%00", "/v1/operations?cursor=%FF", "/v1/operations?limit=99999999999999999999", "/snapshots?limit=-5", "/templates?teamID=%00"];
  for (const q of queries) out.push({ what: `query ${q.slice(0, 40)}`, method: "GET", url: api + q, headers: q.startsWith("/v1") ? native : ecw });
  const bodies: Array<[string, string]> = [
    [`/sandboxes/${id}/timeout`, `{"timeout":${NUL}}`],
    [`/sandboxes/${id}/timeout`, '{"timeout":1e309}'],
    [`/sandboxes/${id}/network`, `{"allowOut":[${NUL}]}`],
    [`/sandboxes/${id}/network`, '{"allowOut":["999.1.1.1/99"]}'],
    [`/sandboxes/${id}/network`, `{"denyOut":[${HUGE(100_000)}]}`],
    [`/sandboxes/${id}/snapshots`, `{"name":${NUL}}`],
    [`/v1/sandboxes/${id}/commands`, `{"cmd":${NUL}}`],
    [`/v1/sandboxes/${id}/commands`, `{"cmd":"true","env":{"A":${SURROGATE}}}`],
    [`/v1/sandboxes/${id}/commands`, '{"cmd":"true","user":"../root"}'],
    [`/v1/sandboxes/${id}/commands`, '{"cmd":"true","timeout_s":1e309}'],
    [`/v1/sandboxes/${id}/fork`, `{"metadata":{"a":${NUL}}}`],
    ["/v1/templates/x%00/builds", "{}"],
    ["/v1/templates/base/builds", `{"dockerfile":${NUL}}`],
  ];
  for (const [path, body] of bodies) {
    const method = path.includes("/network") ? "PUT" : "POST";
    out.push({ what: `body ${body.slice(0, 30)}`, method, url: api + path, headers: { ...(path.startsWith("/v1") ? native : ecw), ...json }, body });
  }
  return out;
}

const RPCS = [
  "filesystem.Filesystem/Stat", "filesystem.Filesystem/MakeDir", "filesystem.Filesystem/Move", "filesystem.Filesystem/ListDir", "filesystem.Filesystem/Remove",
  "filesystem.Filesystem/WatchDir", "filesystem.Filesystem/CreateWatcher", "filesystem.Filesystem/GetWatcherEvents", "filesystem.Filesystem/RemoveWatcher",
  "process.Process/List", "process.Process/Start", "process.Process/Connect", "process.Process/Update", "process.Process/SendInput",
  "process.Process/StreamInput", "process.Process/SendSignal", "process.Process/CloseStdin",
];
const STREAMING = new Set(["filesystem.Filesystem/WatchDir", "process.Process/Start", "process.Process/Connect", "process.Process/StreamInput"]);

/** envd: Connect RPCs with garbage protobuf, wrong JSON, truncated and oversized frames, wrong methods; the files API with bad paths. */
function envdCorpus(gw: string, sb: EcwSandbox, quick: boolean): Req[] {
  const out: Req[] = [];
  const envelope = (flags: number, len: number, payload: number[]) => new Uint8Array([flags, (len >>> 24) & 255, (len >>> 16) & 255, (len >>> 8) & 255, len & 255, ...payload]);
  const jsonBodies = ["{", '{"path":123}', `{"path":${NUL}}`, `{"path":${SURROGATE}}`, `{"path":${HUGE(1 << 20)}}`, '{"pid":"x"}', '{"process":{"cmd":""}}', '{"selector":{"pid":-1}}', "[]", "null"];
  for (const rpc of quick ? RPCS.filter((_, i) => i % 3 === 0) : RPCS) {
    const url = `${gw}/${rpc}`;
    if (STREAMING.has(rpc)) {
      for (const [what, body] of [
        ["truncated frame", envelope(0, 100, [1, 2, 3])],
        ["garbage flags", envelope(0xff, 2, [0xff, 0xff])],
        ["huge length", envelope(0, 0x7fffffff, [0])],
        ["garbage protobuf", envelope(0, 5, [0xff, 0xff, 0xff, 0x07, 0x01])],
        ["short header", new Uint8Array([0, 0])],
      ] as const) out.push({ what: `envd ${rpc} ${what}`, method: "POST", url, headers: envdHeaders(sb, { "content-type": "application/connect+proto", "connect-protocol-version": "1" }), body });
      out.push({ what: `envd ${rpc} json frame`, method: "POST", url, headers: envdHeaders(sb, { "content-type": "application/connect+json" }), body: envelope(0, 1, [0x7b]) });
    } else {
      out.push({ what: `envd ${rpc} garbage protobuf`, method: "POST", url, headers: envdHeaders(sb, { "content-type": "application/proto" }), body: new Uint8Array([0xff, 0xff, 0xff, 0x07, 0x01]) });
      out.push({ what: `envd ${rpc} wrong wire type`, method: "POST", url, headers: envdHeaders(sb, { "content-type": "application/proto" }), body: new Uint8Array([0x0b, 0x0c]) });
      for (const b of quick ? jsonBodies.slice(0, 4) : jsonBodies) out.push({ what: `envd ${rpc} json ${b.slice(0, 20)}`, method: "POST", url, headers: envdHeaders(sb, { "content-type": "application/json" }), body: b });
    }
    out.push({ what: `envd ${rpc} GET`, method: "GET", url, headers: envdHeaders(sb) });
    out.push({ what: `envd ${rpc} text/plain`, method: "POST", url, headers: envdHeaders(sb, { "content-type": "text/plain" }), body: "x" });
  }
  const paths = ["%00", "a%00b", "%ED%A0%80", "%FF", "", "../../../../etc/passwd", "/", "/proc/1/environ", "/proc/1/mem", "/dev/zero", "a".repeat(5000), "/home/user/" + "d/".repeat(2000)];
  for (const p of paths) {
    out.push({ what: `envd files GET ${p.slice(0, 20)}`, method: "GET", url: `${gw}/files?path=${p}&username=user`, headers: envdHeaders(sb) });
    if (!quick) out.push({ what: `envd files POST ${p.slice(0, 20)}`, method: "POST", url: `${gw}/files?path=${p}&username=user`, headers: envdHeaders(sb, { "content-type": "application/octet-stream" }), body: "x" });
  }
  out.push({ what: "envd files bad multipart", method: "POST", url: `${gw}/files?path=/tmp/m`, headers: envdHeaders(sb, { "content-type": "multipart/form-data; boundary=zz" }), body: "--zz\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc" });
  out.push({ what: "envd files multipart no boundary", method: "POST", url: `${gw}/files?path=/tmp/m`, headers: envdHeaders(sb, { "content-type": "multipart/form-data" }), body: "abc" });
  out.push({ what: "envd files bad gzip", method: "POST", url: `${gw}/files?path=/tmp/g`, headers: envdHeaders(sb, { "content-type": "application/octet-stream", "content-encoding": "gzip" }), body: "not gzip" });
  out.push({ what: "envd files unknown user", method: "GET", url: `${gw}/files?path=/etc/hostname&username=nobody-here`, headers: envdHeaders(sb) });
  out.push({ what: "envd files PUT", method: "PUT", url: `${gw}/files?path=/tmp/x`, headers: envdHeaders(sb), body: "x" });
  out.push({ what: "envd init garbage", method: "POST", url: `${gw}/init`, headers: envdHeaders(sb, { "content-type": "application/json" }), body: `{"envVars":${NUL}}` });
  out.push({ what: "envd health POST", method: "POST", url: `${gw}/health`, headers: envdHeaders(sb) });
  out.push({ what: "envd no token", method: "GET", url: `${gw}/files?path=/etc/hostname`, headers: { "e2b-sandbox-id": sb.sandboxID, "e2b-sandbox-port": "49983" } });
  out.push({ what: "gateway bad port", method: "GET", url: `${gw}/`, headers: { "e2b-sandbox-id": sb.sandboxID, "e2b-sandbox-port": "99999" } });
  out.push({ what: "gateway bad id", method: "GET", url: `${gw}/`, headers: { "e2b-sandbox-id": "%00", "e2b-sandbox-port": "49983" }, wire5xx: /The sandbox was not found/ });
  return out;
}

/**
 * Traversal as `user` through the files API: `../` from home, absolute paths, and symlinks
 * (made by root) out to root-only files. Each must be refused (403/404); a 200 with the
 * secret is a finding.
 */
async function traversal(t: Tally, stack: ReviewStack, sb: EcwSandbox, internal: readonly string[]): Promise<void> {
  const secret = `review-secret-${Date.now()}`;
  const setup = await shell(stack.ep, sb.sandboxID, `umask 077 && mkdir -p /root/private && echo ${secret} > /root/private/s && ln -sfn /root/private/s /home/user/link && ln -sfn /root/private /home/user/dirlink && ln -sfn /root/private/new /home/user/wlink && chown -h user:user /home/user/link /home/user/dirlink /home/user/wlink && echo ok`);
  if (setup.out.trim() !== "ok") {
    t.findings.push(`traversal set-up failed: ${setup.out.slice(0, 200)}`);
    return;
  }
  const gw = stack.ep.sandboxUrl;
  const reads = ["../../root/private/s", "/root/private/s", "link", "/home/user/link", "dirlink/s", "/home/user/dirlink/s", "/home/user/../../root/private/s", "./../../root/private/s"];
  for (const p of reads) {
    const r = await probe(t, { what: `traversal read ${p}`, method: "GET", url: `${gw}/files?path=${encodeURIComponent(p)}&username=user`, headers: envdHeaders(sb) }, internal);
    if (r.status === 200 || r.text.includes(secret)) t.find("notRefused", `user read ${p} → ${r.status} ${r.text.slice(0, 80)}`);
  }
  for (const p of ["wlink", "dirlink/x", "../../root/private/x", "/root/private/x"]) {
    const r = await probe(t, { what: `traversal write ${p}`, method: "POST", url: `${gw}/files?path=${encodeURIComponent(p)}&username=user`, headers: envdHeaders(sb, { "content-type": "application/octet-stream" }), body: "pwn" }, internal);
    if (r.status >= 200 && r.status < 300) t.find("notRefused", `user wrote ${p} → ${r.status}`);
  }
  const after = await shell(stack.ep, sb.sandboxID, "ls /root/private");
  if (after.out.trim() !== "s") t.find("notRefused", `root's directory changed by user writes: ${after.out.trim()}`);
}
