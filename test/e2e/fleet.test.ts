/**
 * Direct fleet end to end on a 3-node lab (test/fleet/lab.ts): real Postgres, three
 * `space api` replicas (placement gate off | on | shadow), two `space controller`
 * replicas (one leads; gate shadow, so it reports the census) and three standalone
 * `space node` agents, each in its own network namespace at its own address (distinct
 * hosts to the control plane), sharing one blob store as a real fleet does.
 *
 *   a: group g1, fleet=a, runc      b: group g1, fleet=b, runc      c: group g2, fleet=c, crun
 *
 * crun gives node c a different execution environment (runtime and version are part of
 * its digest), so a and b do not publish c's environment. The base template's build
 * records c's environment as its binding (this build does not distribute templates
 * between nodes yet, so the test records the binding the way a release does): base work
 * is bound work that only c may take under `on`.
 *
 * Proves: registration with verify at each node's own address (and refusal of one that
 * answers with another id); placement across nodes honouring capacity, groups and
 * selectors; the gate in each mode (under `on` a node not publishing the environment gets
 * no bound work, under `shadow` it does and the leader's census counts it); a pinned
 * restore refused with the drain hint; gentle_drain_leaves_sandbox_resident;
 * forced_drain_evacuates_sandbox; a node killed with kill -9 goes unavailable and its
 * sandboxes are reported lost (back, it reclaims them); a controller leader killed with
 * kill -9 while operations are queued and running is replaced within seconds and no
 * operation runs twice.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { Sandbox } from "e2b";
import { waitFor } from "../support/stack.ts";
import { freshDb, postgresSkipReason, type TestDb } from "../support/db.ts";
import { NativeClient, tokenFor, ALL } from "./native-client.ts";
import { startLab, type Lab, type LabNode } from "../fleet/lab.ts";

const skip: string | false =
  postgresSkipReason ||
  (process.getuid?.() !== 0 ? "the fleet test runs node agents (runc, btrfs, netns): run as root" : false) ||
  (!existsSync("dist/envd/envd.mjs") ? "dist/envd/envd.mjs missing: npm run build:envd" : false);

/** `name{labels} value` of a Prometheus text exposition. */
function metric(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) return Number(line.split(" ").pop());
  }
  return undefined;
}

describe("direct fleet: a 3-node lab", { skip, timeout: 900_000 }, () => {
  let db: TestDb;
  let lab: Lab;
  let apiKey = "";
  let native: NativeClient;
  /** Environment only node c publishes (crun); the base template's binding. */
  let envC = "";
  let a: LabNode, b: LabNode, c: LabNode;

  const ecwCreate = async (api: string, placement?: object) => {
    const r = await fetch(`${lab.api(api).url}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({
        templateID: "base",
        timeout: 600,
        metadata: placement ? { "space.placement": JSON.stringify(placement) } : {},
      }),
    });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies read field by field in assertions
    return { status: r.status, body: (await r.json()) as Record<string, any> };
  };
  const ecwKill = (id: string) =>
    fetch(`${lab.api("off").url}/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": apiKey } });
  const nodeOf = async (sandboxId: string) =>
    (await db.db.one<{ nodeId: string }>(`SELECT node_id AS "nodeId" FROM sandboxes WHERE id = $1`, [sandboxId])).nodeId;
  const running = (nodeId: string) =>
    db.db.query<{ id: string }>(`SELECT id FROM sandboxes WHERE node_id = $1 AND state = 'running'`, [nodeId]);
  /** The controller holding the leader lease now. */
  const leaderController = async () => {
    const l = await db.db.maybeOne<{ holder: string }>(`SELECT holder FROM leases WHERE name = 'controller' AND expires_at > now()`);
    const found = lab.controllers.find((x) => l?.holder.includes(`:${x.proc.child.pid}:`));
    assert.ok(found, `the lease holder ${l?.holder} is one of the lab's controllers`);
    return found;
  };

  before(async () => {
    db = await freshDb("postgres");
    lab = await startLab({
      databaseUrl: db.url,
      nodes: [
        { key: "a", group: "g1", labels: { fleet: "a" } },
        { key: "b", group: "g1", labels: { fleet: "b" } },
        { key: "c", group: "g2", labels: { fleet: "c" }, runtime: "crun" },
      ],
      apis: [
        { name: "off", env: { SPACE_ENVIRONMENT_PLACEMENT_GATE: "off" } },
        { name: "on", env: { SPACE_ENVIRONMENT_PLACEMENT_GATE: "on" } },
        { name: "shadow", env: { SPACE_ENVIRONMENT_PLACEMENT_GATE: "shadow" } },
      ],
      controllers: 2,
      controllerEnv: {
        SPACE_ENVIRONMENT_PLACEMENT_GATE: "shadow",
        SPACE_CENSUS_INTERVAL_MS: "1000",
        SPACE_CONTROLLER_CLAIM_STALE_MS: "3000",
      },
    });
    [a, b, c] = [lab.node("a"), lab.node("b"), lab.node("c")];
    const tenant = await lab.admin("POST", "/tenants", { name: `fleet-${lab.run}` });
    apiKey = (await lab.admin("POST", `/tenants/${tenant.body.id}/keys`, {})).body.key;
    assert.ok(apiKey, JSON.stringify(tenant.body));
    native = new NativeClient(lab.api("off").url, await tokenFor(lab.api("off").url, lab.adminToken, tenant.body.id as string, ALL));
  });

  after(async () => {
    const left = await db?.db.query<{ id: string }>(`SELECT id FROM sandboxes WHERE state IN ('running', 'paused')`).catch(() => []);
    for (const s of left ?? []) await ecwKill(s.id).catch(() => {});
    await lab?.stop();
    await db?.drop();
  });

  test("three nodes registered with verify, each at its own address; one answering with another id is refused (422)", async () => {
    const list = await lab.admin("GET", "/nodes");
    assert.equal(list.status, 200);
    assert.equal(list.body.nodes.length, 3);
    for (const n of lab.nodes) {
      const rec = list.body.nodes.find((x: { name: string }) => x.name === n.name);
      assert.ok(rec, `node ${n.name} registered: ${JSON.stringify(list.body)}`);
      assert.equal(rec.status, "ready");
      assert.equal(rec.node_group, n.spec.group);
      assert.deepEqual(rec.labels, n.spec.labels);
      assert.ok(rec.verified_at, "verified");
      assert.equal(rec.address, n.address, "registered at its own namespace's address");
      assert.equal(rec.usable_environments.length, 1);
      n.id = rec.id;
    }
    assert.equal(new Set(lab.nodes.map((n) => n.address)).size, 3);
    envC = (await lab.admin("GET", `/nodes/${c.id}`)).body.usable_environments[0];
    const envA = (await lab.admin("GET", `/nodes/${a.id}`)).body.usable_environments[0];
    assert.notEqual(envA, envC, "crun on c is another execution environment");
    assert.equal((await lab.admin("GET", `/nodes/${b.id}`)).body.usable_environments[0], envA);

    // An agent claiming a's address under another id: a answers with its own id.
    const impostor = await lab.admin(
      "POST",
      "/nodes",
      { id: crypto.randomUUID(), name: `impostor-${lab.run}`, address: a.address, verify: true },
      lab.internalToken,
    );
    assert.equal(impostor.status, 422, JSON.stringify(impostor.body));
    assert.match(impostor.body.message, new RegExp(`answered with id ${a.id}`));
    assert.equal((await lab.admin("GET", "/nodes")).body.nodes.length, 3, "nothing stored for the refused registration");

    // The base template's release records c's environment (see the header).
    await db.db.execute(`INSERT INTO templates (id, name, public) VALUES ('base', 'base', true)`);
    await db.db.execute(`INSERT INTO builds (id, template_id, status, environment) VALUES ($1, 'base', 'ready', $2)`, [
      `bld_lab${lab.run}`,
      envC,
    ]);
  });

  test("placement across nodes: concurrent creates spread, capacity, node groups and selectors are honoured", async () => {
    // Capacity (docs/capacity.md; the lab counts 0.1 CPU per vCPU): a node's 2 CPUs admit
    // 20 vCPUs. 12 on a; 12 more in g1 do not fit on a and go to b; a third finds both full.
    // No heartbeat is awaited: the store's ledger holds each reservation the moment it is made.
    const big = (placement: object) => native.req("POST", "/v1/sandboxes", { body: { template: "base", vcpu: 12, timeout_s: 600, metadata: { "space.placement": JSON.stringify(placement) } } });
    const first = await native.wait((await big({ node_selector: { fleet: "a" } })).body.id);
    assert.equal(first.state, "succeeded", JSON.stringify(first));
    assert.equal(await nodeOf(first.result.id), a.id);
    const second = await native.wait((await big({ node_group: "g1" })).body.id);
    assert.equal(second.state, "succeeded", JSON.stringify(second));
    assert.equal(await nodeOf(second.result.id), b.id, "a has no room for 12 more vCPUs: b takes it");
    const third = await native.wait((await big({ node_group: "g1" })).body.id);
    assert.equal(third.state, "failed", JSON.stringify(third));
    assert.match(third.failure.message, /2 nodes full \(vcpu\), 1 node outside node group g1/);
    // The ledger frees a killed sandbox's reservation when its kill is done (the row leaves
    // `killing`), which is when the kill operation succeeds; the rows stop being `running` before that.
    for (const op of [first, second]) {
      const kill = await native.req("DELETE", `/v1/sandboxes/${op.result.id}`);
      assert.equal(kill.status, 202);
      assert.equal((await native.wait(kill.body.id)).state, "succeeded");
    }
    assert.equal((await running(a.id!)).length + (await running(b.id!)).length, 0, "big sandboxes gone");
    await waitFor(
      async () => {
        const nodes = (await lab.admin("GET", "/nodes")).body.nodes as Array<{ used: { vcpu: number } }>;
        return nodes.every((n) => n.used.vcpu === 0);
      },
      "nodes publish their capacity freed",
      20_000,
      200,
    );

    // Three concurrent unconstrained creates on an idle fleet: one per node.
    const spread = await Promise.all([0, 1, 2].map(() => ecwCreate("off")));
    for (const s of spread) assert.equal(s.status, 201, JSON.stringify(s.body));
    const homes = await Promise.all(spread.map((s) => nodeOf(s.body.sandboxID)));
    if (new Set(homes).size !== 3) {
      // What placement read, so a failure names its cause (seen once in a no-cache CI run).
      const rows = await db.db.query(`SELECT name, status, used, last_heartbeat_at FROM nodes ORDER BY name`);
      const held = await db.db.query(`SELECT node_id, state, count(*)::int AS n FROM sandboxes WHERE node_id IS NOT NULL GROUP BY node_id, state`);
      const name = (id: string) => [a, b, c].find((n) => n.id === id)?.name ?? id;
      assert.fail(`spread over the three nodes: ${homes.map(name).join(", ")}; nodes ${JSON.stringify(rows)}; sandboxes ${JSON.stringify(held.map((r) => ({ ...r, node_id: name(String(r.node_id)) })))}`);
    }

    // node_group_boundary_schedules and node_selector_extras_render_and_enforce.
    for (const [placement, want] of [
      [{ node_group: "g2" }, [c]],
      [{ node_group: "g1" }, [a, b]],
      [{ node_selector: { fleet: "b" } }, [b]],
      [{ node_group: "g1", node_selector: { fleet: "a" } }, [a]],
    ] as const) {
      const s = await ecwCreate("off", placement);
      assert.equal(s.status, 201, JSON.stringify(s.body));
      const home = await nodeOf(s.body.sandboxID);
      assert.ok(want.some((n) => n.id === home), `${JSON.stringify(placement)} landed on ${home}`);
    }
    const none = await ecwCreate("off", { node_selector: { fleet: "nowhere" } });
    assert.equal(none.status, 409, JSON.stringify(none.body));
    assert.match(none.body.message, /3 nodes not matching node selector fleet=nowhere/);
    const wrong = await ecwCreate("off", { node_group: "g2", node_selector: { fleet: "a" } });
    assert.equal(wrong.status, 409, JSON.stringify(wrong.body));
    assert.match(wrong.body.message, /2 nodes outside node group g2, 1 node not matching node selector fleet=a/);
  });

  test("gate on: nodes not publishing the environment get no bound work; gate shadow: they do, and the census counts it", async () => {
    // on: unconstrained base work goes to c, the only node publishing its environment.
    for (let i = 0; i < 2; i++) {
      const s = await ecwCreate("on");
      assert.equal(s.status, 201, JSON.stringify(s.body));
      assert.equal(await nodeOf(s.body.sandboxID), c.id, "under on, bound work lands only on c");
    }
    const toA = await ecwCreate("on", { node_selector: { fleet: "a" } });
    assert.equal(toA.status, 409, JSON.stringify(toA.body));
    assert.match(toA.body.message, new RegExp(`2 nodes not matching node selector fleet=a, 1 node lacks environment ${envC}`));
    const g1 = await ecwCreate("on", { node_group: "g1" });
    assert.equal(g1.status, 409, JSON.stringify(g1.body));
    assert.match(g1.body.message, new RegExp(`2 nodes lack environment ${envC}`));

    // shadow: placed exactly as off (on a), recorded as a placement `on` would have refused.
    const sh = await ecwCreate("shadow", { node_selector: { fleet: "a" } });
    assert.equal(sh.status, 201, JSON.stringify(sh.body));
    assert.equal(await nodeOf(sh.body.sandboxID), a.id);
    const shadowMetrics = await (await fetch(`${lab.api("shadow").url}/metrics`)).text();
    assert.equal(
      metric(shadowMetrics, "environment_placement_decisions_total", { gate: "shadow", placement: "environment_not_usable", shadow_would_fail: "true" }),
      1,
      shadowMetrics.split("\n").filter((l) => l.includes("environment_placement")).join("\n"),
    );
    assert.match(lab.api("shadow").proc.out(), /`on` would have refused this placement/);

    // The leader's census: running sandboxes on a and b (not publishing envC) vs on c.
    const leader = await leaderController();
    const want = { environment_not_usable: (await running(a.id!)).length + (await running(b.id!)).length, admitted: (await running(c.id!)).length };
    assert.ok(want.environment_not_usable >= 1 && want.admitted >= 1, JSON.stringify(want));
    await waitFor(
      async () => {
        const text = await (await fetch(leader.metricsUrl)).text();
        return (
          metric(text, "environment_placement_running_pods", { placement: "environment_not_usable" }) === want.environment_not_usable &&
          metric(text, "environment_placement_running_pods", { placement: "admitted" }) === want.admitted
        );
      },
      `census of the leader reports ${JSON.stringify(want)}`,
      15_000,
      250,
    );
  });

  test("a restore pinned to a node not publishing the environment is refused (409) with the drain hint", async () => {
    const s = await ecwCreate("off", { node_selector: { fleet: "a" } });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const id = s.body.sandboxID as string;
    const pause = await fetch(`${lab.api("off").url}/sandboxes/${id}/pause`, { method: "POST", headers: { "x-api-key": apiKey } });
    assert.equal(pause.status, 204, await pause.text());
    // The pause publishes after answering (#25): wait for `durable`, so the upload cannot undo the rewrite below.
    await waitFor(
      async () => (await db.db.maybeOne<{ id: string }>(`SELECT id FROM snapshots WHERE sandbox_id = $1 AND state = 'durable'`, [id])) ?? undefined,
      "the pause's snapshot is durable",
      60_000,
    );
    // Its snapshot kept on a only (the state a node without remote storage leaves): restores are pinned to a.
    const snap = await db.db.one<{ id: string }>(
      `UPDATE snapshots SET state = 'local' WHERE sandbox_id = $1 AND state = 'durable' RETURNING id`,
      [id],
    );
    assert.ok(snap.id);
    const connect = (api: string) =>
      fetch(`${lab.api(api).url}/sandboxes/${id}/connect`, {
        method: "POST",
        headers: { "x-api-key": apiKey, "content-type": "application/json" },
        body: JSON.stringify({ timeout: 600 }),
      });
    const refused = await connect("on");
    assert.equal(refused.status, 409);
    const msg = ((await refused.json()) as { message: string }).message;
    assert.match(msg, new RegExp(`pinned to node ${a.name}, which does not publish environment ${envC}`));
    assert.match(msg, new RegExp(`drain the node \\(POST /admin/api/v1/nodes/${a.id}/drain\\) so the snapshot is published to remote storage`));
    const row = await db.db.one<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [id]);
    assert.equal(row.state, "suspended", "refused before anything changed");
    // Without the gate the pin holds: it restores on a.
    const ok = await connect("off");
    assert.equal(ok.status, 201, await ok.text());
    assert.equal(await nodeOf(id), a.id);
  });

  test("gentle_drain_leaves_sandbox_resident (through `space node drain`): new creates avoid the drained node", async () => {
    const residents = await running(a.id!);
    assert.ok(residents.length >= 2);
    const d = await lab.cli(["node", "drain", a.name]);
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, new RegExp(`node ${a.name} \\(${a.id}\\) is draining \\(gentle\\).*its sandboxes stay`));
    assert.equal((await lab.admin("GET", `/nodes/${a.id}`)).body.status, "draining");
    for (let i = 0; i < 2; i++) {
      const s = await ecwCreate("off", { node_group: "g1" });
      assert.equal(s.status, 201, JSON.stringify(s.body));
      assert.equal(await nodeOf(s.body.sandboxID), b.id, "g1 work avoids the drained node");
    }
    const inA = await ecwCreate("off", { node_selector: { fleet: "a" } });
    assert.equal(inA.status, 409, JSON.stringify(inA.body));
    assert.match(inA.body.message, /1 node draining/);
    for (const r of residents) {
      const g = await fetch(`${lab.api("off").url}/sandboxes/${r.id}`, { headers: { "x-api-key": apiKey } });
      assert.equal(g.status, 200);
      assert.equal(((await g.json()) as { state: string }).state, "running", "residents stay");
    }
    const shown = await lab.admin("GET", `/nodes/${a.id}`);
    assert.equal(shown.body.resident_sandboxes, residents.length);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await lab.admin("GET", `/nodes/${a.id}`)).body.status, "draining", "heartbeats keep the drain");
    const list = await lab.cli(["node", "list"]);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, new RegExp(`${a.name}\t${a.id}\tdraining \\(gentle\\)\tg1\t${a.address}\t\\d+\t`));
    const ready = await lab.cli(["node", "undrain", a.id!]);
    assert.equal(ready.code, 0, ready.stderr);
    assert.equal((await lab.admin("GET", `/nodes/${a.id}`)).body.status, "ready");
    const unknown = await lab.cli(["node", "drain", "no-such-node"]);
    assert.equal(unknown.code, 3, "not found (docs/cli.md exit codes)");
    assert.match(unknown.stderr, /no node has the id or name no-such-node/);
  });

  test("forced_drain_evacuates_sandbox (through `space node drain --forced`): file, env and a running process move from a to b with the same id", async (t) => {
    const opts = { apiKey, apiUrl: lab.api("off").url, sandboxUrl: lab.api("off").gatewayUrl, requestTimeoutMs: 120_000 };
    const mark = `evac-${randomBytes(4).toString("hex")}`;
    // Unconstrained (so it may move), put on a by draining b and c for the create; c stays
    // drained during the move, as c (crun) cannot restore a runc checkpoint.
    for (const n of [b, c]) assert.equal((await lab.admin("POST", `/nodes/${n.id}/drain`, { mode: "gentle" })).status, 200);
    // Whatever happens here, the next tests find every node ready.
    t.after(async () => {
      for (const n of [a, b, c]) await lab.admin("POST", `/nodes/${n.id}/ready`, {});
    });
    const sb = await Sandbox.create({ ...opts, envs: { EVAC_MARK: mark }, timeoutMs: 600_000 });
    assert.equal((await lab.admin("POST", `/nodes/${b.id}/ready`, {})).body.status, "ready");
    assert.equal(await nodeOf(sb.sandboxId), a.id);
    await sb.files.write("/home/user/evac.txt", mark);
    await sb.commands.run(`nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /home/user/n.tmp; mv -f /home/user/n.tmp /home/user/n; sleep 0.1; done' >/dev/null 2>&1 &`);
    await new Promise((r) => setTimeout(r, 500));
    const before = Number((await sb.files.read("/home/user/n")).trim());
    assert.ok(before > 0, `the loop runs (${before})`);

    const drainStarted = Date.now();
    const cli = await lab.cli(["node", "drain", a.name, "--forced", "--json"]);
    t.diagnostic(`forced drain of a (CLI included) took ${Date.now() - drainStarted} ms`);
    assert.equal(cli.code, 0, cli.stderr);
    const d = { body: JSON.parse(cli.stdout) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any -- the API's JSON answer
    assert.equal(d.body.drain_mode, "forced");
    const mine = d.body.evacuation.sandboxes.find((o: { sandbox_id: string }) => o.sandbox_id === sb.sandboxId);
    assert.ok(mine, JSON.stringify(d.body.evacuation));
    assert.equal(mine.outcome, "moved", JSON.stringify(mine));
    assert.equal(mine.to_node_id, b.id);
    assert.equal(await nodeOf(sb.sandboxId), b.id);
    assert.equal((await db.db.one<{ state: string }>(`SELECT state FROM snapshots WHERE id = $1`, [mine.snapshot_id])).state, "durable");
    // Residents pinned to a by their selector cannot move: they stay, running on a, with the reason.
    for (const o of d.body.evacuation.sandboxes.filter((x: { sandbox_id: string }) => x.sandbox_id !== sb.sandboxId)) {
      const row = await db.db.one<{ state: string; nodeId: string }>(`SELECT state, node_id AS "nodeId" FROM sandboxes WHERE id = $1`, [o.sandbox_id]);
      assert.equal(row.state, "running", JSON.stringify(o));
      assert.equal(row.nodeId, o.outcome === "moved" ? o.to_node_id : a.id, JSON.stringify(o));
    }
    const info = await Sandbox.getInfo(sb.sandboxId, opts);
    assert.equal(info.state, "running");
    assert.equal(await sb.files.read("/home/user/evac.txt"), mark);
    assert.equal((await sb.commands.run("echo $EVAC_MARK")).stdout, `${mark}\n`);
    const after1 = Number((await sb.files.read("/home/user/n")).trim());
    await new Promise((r) => setTimeout(r, 400));
    const after2 = Number((await sb.files.read("/home/user/n")).trim());
    assert.ok(after1 >= before && after2 > after1, `the loop kept its count and runs on (${before} → ${after1} → ${after2})`);
    assert.ok(!a.containers().includes(sb.sandboxId), "no longer on node a");
    await sb.kill();
  });

  test("paused through one replica, connected through another at once while its node drains: the connect waits for the upload and restores on the other node", async (t) => {
    const opts = { apiKey, apiUrl: lab.api("off").url, sandboxUrl: lab.api("off").gatewayUrl, requestTimeoutMs: 120_000 };
    // Put it on a (b and c drained for the create); c stays drained: crun cannot restore a runc checkpoint.
    for (const n of [b, c]) assert.equal((await lab.admin("POST", `/nodes/${n.id}/drain`, { mode: "gentle" })).status, 200);
    t.after(async () => {
      for (const n of [a, b, c]) await lab.admin("POST", `/nodes/${n.id}/ready`, {});
    });
    const sb = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    assert.equal((await lab.admin("POST", `/nodes/${b.id}/ready`, {})).body.status, "ready");
    assert.equal(await nodeOf(sb.sandboxId), a.id);
    // Incompressible bytes: the upload behind the pause takes seconds, the window for the connect.
    await sb.commands.run("head -c 400M /dev/urandom > /home/user/big && sync", { timeoutMs: 300_000 });
    assert.equal(await sb.pause(), true);
    assert.equal((await lab.admin("POST", `/nodes/${a.id}/drain`, { mode: "gentle" })).status, 200);
    const snap = await db.db.one<{ id: string; state: string }>(`SELECT id, state FROM snapshots WHERE sandbox_id = $1 AND purpose = 'suspend' AND state IN ('local', 'durable')`, [sb.sandboxId]);
    t.diagnostic(`snapshot ${snap.id} was ${snap.state} when the connect went to the other replica`);
    // The replica that paused publishes; this one has no publication of its own to wait for.
    const r = await fetch(`${lab.api("shadow").url}/sandboxes/${sb.sandboxId}/connect`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({ timeout: 600 }),
    });
    assert.equal(r.status, 201, await r.clone().text());
    assert.equal(await nodeOf(sb.sandboxId), b.id, "restored on the node that is not draining");
    assert.equal((await db.db.one<{ state: string }>(`SELECT state FROM snapshots WHERE id = $1`, [snap.id])).state, "durable");
    const again = await Sandbox.connect(sb.sandboxId, { ...opts, apiUrl: lab.api("shadow").url, sandboxUrl: lab.api("shadow").gatewayUrl });
    assert.equal((await again.commands.run("stat -c %s /home/user/big")).stdout, `${400 * 1024 * 1024}\n`);
    await again.kill();
  });

  test("a node killed with kill -9 goes unavailable and its sandboxes are reported lost; back, it reclaims them", async (t) => {
    const onB = await running(b.id!);
    assert.ok(onB.length > 0);
    t.after(async () => {
      if (b.proc!.exited()) await b.start();
    });
    await b.proc!.stop("SIGKILL");
    const t0 = Date.now();
    await waitFor(async () => (await lab.admin("GET", `/nodes/${b.id}`)).body.status === "unavailable", "node b unavailable", 30_000, 250);
    const tookMs = Date.now() - t0;
    t.diagnostic(`node b unavailable ${tookMs} ms after kill -9 (heartbeat 1 s, grace 4 s)`);
    const rows = await waitFor(
      async () => {
        const r = await db.db.query<{ state: string; reason: string | null }>(
          `SELECT state, failure_message AS reason FROM sandboxes WHERE id = ANY($1::text[])`,
          [onB.map((s) => s.id)],
        );
        return r.every((x) => x.state === "failed") ? r : null;
      },
      "sandboxes of node b reported lost",
      15_000,
      250,
    );
    for (const r of rows) assert.match(r.reason ?? "", new RegExp(`^lost: node ${b.name} \\(${b.id}\\) stopped heartbeating`));
    assert.ok(tookMs < 20_000, `unavailable after ${tookMs} ms`);
    const s = await ecwCreate("off", { node_group: "g1" });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    assert.equal(await nodeOf(s.body.sandboxID), a.id, "new work avoids the silent node");
    await b.start();
    await waitFor(async () => (await lab.admin("GET", `/nodes/${b.id}`)).body.status === "ready", "node b ready again", 30_000, 250);
    const left = b.containers();
    for (const x of onB) assert.ok(!left.includes(x.id), `lost sandbox ${x.id} reclaimed on restart`);
  });

  test("a controller leader killed with kill -9 is replaced within seconds; no operation runs twice", async (t) => {
    const sid = await native.create({ timeout_s: 600 });
    const leader = await leaderController();
    const standby = lab.controllers.find((x) => x !== leader)!;

    // Queued and running work: six commands that each append their tag once, then wait for
    // a go file (so they are still running when the new leader re-claims them), and two creates.
    const tags = [0, 1, 2, 3, 4, 5].map((i) => `op${i}-${randomBytes(3).toString("hex")}`);
    const ops: string[] = [];
    for (const tag of tags) {
      const r = await native.req("POST", `/v1/sandboxes/${sid}/commands`, { body: { cmd: "sh", args: ["-c", `echo ${tag} >> /tmp/ran; while [ ! -e /tmp/go ]; do sleep 0.2; done`] } });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      ops.push(r.body.id);
    }
    for (let i = 0; i < 2; i++) {
      const r = await native.req("POST", "/v1/sandboxes", { body: { template: "base", timeout_s: 600 } });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      ops.push(r.body.id);
    }
    await waitFor(
      async () => (await db.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM operations WHERE id = ANY($1::text[]) AND state = 'claimed'`, [ops])).n > 0,
      "the leader claimed some of the work",
      20_000,
      50,
    );
    await leader.proc.stop("SIGKILL");
    const killedAt = Date.now();
    await waitFor(() => standby.proc.out().includes("controller elected leader"), "the standby takes over", 30_000, 100);
    const takeoverMs = Date.now() - killedAt;
    assert.ok(takeoverMs < 15_000, `standby led ${takeoverMs} ms after the kill (lease 5 s)`);
    t.diagnostic(`standby controller elected ${takeoverMs} ms after kill -9 of the leader (lease 5 s)`);

    const commandOps = ops.slice(0, tags.length);
    await waitFor(
      async () =>
        (
          await db.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM operations WHERE id = ANY($1::text[]) AND claimed_by LIKE $2`, [
            commandOps,
            `%-${standby.proc.child.pid}-%`,
          ])
        ).n === commandOps.length,
      "the new leader holds every command",
      60_000,
      200,
    );
    await native.run(sid, { cmd: "touch", args: ["/tmp/go"] });
    const done = await Promise.all(ops.map((id) => native.wait(id, 120_000)));
    for (const op of done) assert.equal(op.state, "succeeded", JSON.stringify(op));
    const rows = await db.db.query<{ claimCount: number }>(`SELECT claim_count AS "claimCount" FROM operations WHERE id = ANY($1::text[])`, [ops]);
    assert.ok(rows.some((r) => r.claimCount > 1), "work the dead leader held was claimed again by the new one");
    t.diagnostic(`claim counts of the ${rows.length} operations: ${rows.map((r) => r.claimCount).join(",")}`);
    // Each command's effect happened exactly once, re-claimed or not.
    const out = await native.run(sid, { cmd: "cat", args: ["/tmp/ran"] });
    const lines = out.stdout.split("\n").filter(Boolean);
    for (const tag of tags) assert.equal(lines.filter((l) => l === tag).length, 1, `${tag} ran once: ${JSON.stringify(lines)}`);
    assert.equal(lines.length, tags.length);
    // Each create made one sandbox, running.
    for (const op of done.slice(tags.length)) {
      const s = await db.db.query<{ state: string }>(`SELECT state FROM sandboxes WHERE id = $1`, [op.result.id]);
      assert.deepEqual(s.map((x) => x.state), ["running"]);
    }
    const sandboxes = await db.db.one<{ n: number }>(`SELECT count(*)::int AS n FROM operations WHERE id = ANY($1::text[]) AND kind = 'sandbox.create'`, [ops]);
    assert.equal(sandboxes.n, 2);
    leader.start();
    await leader.proc.waitFor("opening database", 30_000);
  });
});
