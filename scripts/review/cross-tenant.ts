/**
 * Area c, cross-tenant: tenant B (its own API key and Native token) tries every ECW,
 * Native and envd route on tenant A's sandbox, operation, command and named snapshot.
 * Every answer must be 404 or 403 (envd without A's access token: 401 too, E2B's answer),
 * B's lists must not show A's objects, and A's sandbox must be untouched afterwards.
 */
import { call, createEcw, envdHeaders, killEcw, newTenant, waitOperation } from "./clients.ts";
import { probe } from "./probe-http.ts";
import { Tally, type AreaResult } from "./report.ts";
import type { ReviewStack } from "./review-stack.ts";

export async function crossTenant(stack: ReviewStack): Promise<AreaResult> {
  const started = Date.now();
  const t = new Tally();
  t.measure("tried", "serverErrors", "leakedText", "notRefused");
  const ep = stack.ep;
  const internal = [stack.dataDir];
  const b = await newTenant(ep, `review-b-${Date.now()}`);
  const sb = await createEcw(ep);
  const id = sb.sandboxID;
  try {
    const cmd = await call(ep, "POST", `/v1/sandboxes/${id}/commands`, { bearer: ep.apiKey, body: { cmd: "/bin/echo", args: ["a's"] } });
    if (cmd.status !== 202) throw new Error(`A's command: ${cmd.status} ${cmd.text}`);
    await waitOperation(ep, ep.apiKey, cmd.body.id);
    const opId = String(cmd.body.id);
    const cid = String(cmd.body.target).split("/")[3];
    const snap = await call(ep, "POST", `/sandboxes/${id}/snapshots`, { body: { name: `review-a-${Date.now()}` } });
    const snapId = snap.status === 201 || snap.status === 200 ? String(snap.body.snapshotID) : "";
    if (!snapId) t.findings.push(`A's named snapshot: ${snap.status} ${snap.text.slice(0, 200)}`);

    const ecw = { "x-api-key": b.apiKey, "content-type": "application/json" };
    const native = { authorization: `Bearer ${b.token}`, "content-type": "application/json" };
    const attempts: Array<[string, string, Record<string, string>, string?]> = [
      ["GET", `/sandboxes/${id}`, ecw],
      ["DELETE", `/sandboxes/${id}`, ecw],
      ["POST", `/sandboxes/${id}/connect`, ecw, '{"timeout":60}'],
      ["POST", `/v2/sandboxes/${id}/connect`, ecw, '{"timeout":60}'],
      ["POST", `/sandboxes/${id}/pause`, ecw, "{}"],
      ["POST", `/sandboxes/${id}/resume`, ecw, '{"timeout":60}'],
      ["POST", `/sandboxes/${id}/timeout`, ecw, '{"timeout":60}'],
      ["POST", `/sandboxes/${id}/refreshes`, ecw, '{"duration":60}'],
      ["POST", `/sandboxes/${id}/fork`, ecw, "{}"],
      ["POST", `/sandboxes/${id}/snapshots`, ecw, '{"name":"stolen"}'],
      ["GET", `/sandboxes/${id}/logs`, ecw],
      ["GET", `/v2/sandboxes/${id}/logs`, ecw],
      ["GET", `/sandboxes/${id}/metrics`, ecw],
      ["PUT", `/sandboxes/${id}/network`, ecw, '{"allowOut":["0.0.0.0/0"]}'],
      ["GET", `/v1/sandboxes/${id}`, native],
      ["GET", `/v1/sandboxes/${id}/network`, native],
      ["DELETE", `/v1/sandboxes/${id}`, native],
      ["POST", `/v1/sandboxes/${id}/commands`, native, '{"cmd":"/bin/true"}'],
      ["GET", `/v1/sandboxes/${id}/commands/${cid}`, native],
      ["GET", `/v1/sandboxes/${id}/commands/${cid}/output`, native],
      ["POST", `/v1/sandboxes/${id}/commands/${cid}/cancel`, native, "{}"],
      ...["pause", "resume", "stop", "start", "suspend", "restore"].map((v) => ["POST", `/v1/sandboxes/${id}/${v}`, native, "{}"] as [string, string, Record<string, string>, string]),
      ["POST", `/v1/sandboxes/${id}/fork`, native, "{}"],
      ["GET", `/v1/operations/${opId}`, native],
      ...(snapId
        ? ([
            ["DELETE", `/templates/${snapId}`, ecw],
            ["POST", "/sandboxes", ecw, JSON.stringify({ templateID: snapId, timeout: 60 })],
            ["POST", "/v1/sandboxes", native, JSON.stringify({ template: snapId, timeout_s: 60 })],
            ["GET", `/v1/templates/${snapId}`, native],
          ] as Array<[string, string, Record<string, string>, string?]>)
        : []),
    ];
    for (const [method, path, headers, body] of attempts) {
      const r = await probe(t, { what: `tenant B ${method} ${path}`, method, url: ep.apiUrl + path, headers, ...(body !== undefined ? { body } : {}) }, internal);
      // A create from A's snapshot is an operation for Native: it must fail not_found, not start A's disk.
      if (path === "/v1/sandboxes" && r.status === 202) {
        const op = await waitOperation(ep, b.token, JSON.parse(r.text).id as string);
        if (op.state !== "failed" || op.failure?.code !== "not_found") t.find("notRefused", `tenant B create from A's snapshot: operation ${op.state} ${JSON.stringify(op.failure ?? op.result).slice(0, 200)}`);
        continue;
      }
      if (r.status !== 404 && r.status !== 403) t.find("notRefused", `tenant B ${method} ${path} → ${r.status} ${r.text.slice(0, 160)}`);
    }
    // envd through the gateway: B knows A's id but not its access token.
    for (const [method, path, body] of [
      ["GET", "/files?path=/etc/hostname", undefined],
      ["POST", "/files?path=/tmp/b", "b"],
      ["POST", "/process.Process/List", "{}"],
      ["POST", "/filesystem.Filesystem/ListDir", '{"path":"/"}'],
    ] as Array<[string, string, string?]>) {
      const headers = { ...envdHeaders({ sandboxID: id }), "content-type": "application/json", "x-api-key": b.apiKey };
      const r = await probe(t, { what: `tenant B envd ${path}`, method, url: ep.sandboxUrl + path, headers, ...(body !== undefined ? { body } : {}) }, internal);
      if (![401, 403, 404].includes(r.status)) t.find("notRefused", `tenant B envd ${method} ${path} → ${r.status} ${r.text.slice(0, 160)}`);
    }
    // B's lists and batch reads hold none of A's objects (B's own operations name A's snapshot only as what B asked for).
    for (const [path, headers] of [["/v2/sandboxes", ecw], ["/sandboxes", ecw], ["/snapshots", ecw], [`/sandboxes/metrics?sandbox_ids=${id}`, ecw], ["/v1/sandboxes", native], ["/v1/operations", native], ["/templates", ecw]] as const) {
      const r = await probe(t, { what: `tenant B list ${path}`, method: "GET", url: ep.apiUrl + path, headers }, internal);
      const body = r.text.replace(path, "");
      if ([id, opId, path === "/v1/operations" ? "" : snapId].some((x) => x && body.includes(x))) t.find("notRefused", `tenant B's ${path} shows A's objects: ${r.text.slice(0, 200)}`);
    }
    const still = await call(ep, "GET", `/sandboxes/${id}`);
    if (still.status !== 200 || still.body.state !== "running") t.find("notRefused", `A's sandbox after B's attempts: ${still.status} ${still.text.slice(0, 160)}`);
    if (snapId) await call(ep, "DELETE", `/templates/${snapId}`);
  } finally {
    await killEcw(ep, id);
  }
  return t.result("tenants", "c. cross-tenant", started);
}
