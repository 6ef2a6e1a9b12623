/**
 * Direct fleet end to end, on real Postgres: `space api` + `space controller` and two
 * standalone `space node` processes on this machine, each in its own host scope (bridge,
 * nft table, veth prefix, cgroup parent, runtime state dir, slot range, node dir, port).
 *
 * Proves: registration with verify (and refusal of a registration whose address answers
 * with another id); node_group_boundary_schedules; node_selector_extras_render_and_enforce
 * (selector enforced, unmatched selector refused with the reason per node class);
 * gentle_drain_leaves_sandbox_resident (new creates avoid the drained node, residents
 * stay); a node killed with SIGKILL goes unavailable and its sandboxes are reported
 * lost; restarted, it reclaims them; forced_drain_evacuates_sandbox (a sandbox with a file,
 * an env var and a running process on node A, forced drain of A: it runs on node B with
 * the same id, file, env and memory). Every process shares one blob store (SPACE_BLOB_URL),
 * as a real fleet does: evacuation publishes the snapshot there and B fetches it.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Sandbox } from "e2b";
import { freePort, removeDataDir, waitFor } from "../support/stack.ts";
import { runSpace, type SpaceProcess } from "../support/space-process.ts";
import { freshDb, postgresSkipReason, type TestDb } from "../support/db.ts";

const skip: string | false =
  postgresSkipReason ||
  (process.getuid?.() !== 0 ? "the fleet test runs node agents (runc, btrfs, netns): run as root" : false) ||
  (!existsSync("dist/envd/envd.mjs") ? "dist/envd/envd.mjs missing: npm run build:envd" : false);

const ADMIN = `adm_${randomBytes(12).toString("hex")}`;
const INTERNAL = `int_${randomBytes(12).toString("hex")}`;
const RUN = randomBytes(3).toString("hex");

interface FleetNode {
  key: "a" | "b";
  group: string;
  port: number;
  dataDir: string;
  stateDir: string;
  env: Record<string, string>;
  proc?: SpaceProcess;
  id?: string;
}

describe("direct fleet: two standalone nodes", { skip, timeout: 180_000 }, () => {
  let db: TestDb;
  let api: SpaceProcess;
  let controller: SpaceProcess;
  let apiUrl = "";
  let gatewayUrl = "";
  let apiKey = "";
  const nodes: FleetNode[] = [];
  const ctlDir = mkdtempSync(join(tmpdir(), "space-fleet-ctl-"));

  const admin = async (method: string, path: string, body?: unknown, token = ADMIN) => {
    const r = await fetch(`${apiUrl}/admin/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.text();
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies read field by field in assertions
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, any> };
  };
  const ecwCreate = async (placement?: object) => {
    const r = await fetch(`${apiUrl}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "content-type": "application/json" },
      body: JSON.stringify({
        templateID: "base",
        timeout: 170,
        metadata: placement ? { "space.placement": JSON.stringify(placement) } : {},
      }),
    });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- JSON bodies read field by field in assertions
    return { status: r.status, body: (await r.json()) as Record<string, any> };
  };
  const nodeOf = async (sandboxId: string) =>
    (await db.db.one<{ nodeId: string }>(`SELECT node_id AS "nodeId" FROM sandboxes WHERE id = $1`, [sandboxId])).nodeId;

  function startNode(n: FleetNode) {
    n.proc = runSpace(["node"], n.env);
    return n.proc.waitFor("is up at", 150_000);
  }

  before(async () => {
    db = await freshDb("postgres");
    const [apiPort, gwPort] = [await freePort(), await freePort()];
    apiUrl = `http://127.0.0.1:${apiPort}`;
    gatewayUrl = `http://127.0.0.1:${gwPort}`;
    const common = {
      SPACE_BLOB_URL: join(ctlDir, "blobs"),
      SPACE_DATABASE_URL: db.url,
      SPACE_ADMIN_TOKEN: ADMIN,
      SPACE_INTERNAL_TOKEN: INTERNAL,
      SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "info",
      SPACE_NODE_HEARTBEAT_MS: "1000",
      SPACE_NODE_HEARTBEAT_GRACE_MS: "4000",
    };
    api = runSpace(["api"], {
      ...common,
      SPACE_DATA_DIR: ctlDir,
      SPACE_API_PORT: String(apiPort),
      SPACE_GATEWAY_PORT: String(gwPort),
    });
    controller = runSpace(["controller"], { ...common, SPACE_DATA_DIR: ctlDir });
    await api.waitFor("api listening", 60_000);
    await controller.waitFor("controller elected leader", 60_000);
    const tenant = await admin("POST", "/tenants", { name: `fleet-${RUN}` });
    apiKey = (await admin("POST", `/tenants/${tenant.body.id}/keys`, {})).body.key;
    assert.ok(apiKey, JSON.stringify(tenant.body));

    for (const [i, key] of (["a", "b"] as const).entries()) {
      const dataDir = mkdtempSync(join(tmpdir(), `space-fleet-${key}-`));
      const port = await freePort();
      const stateDir = `/run/space-fleet/${dataDir.split("/").pop()}`;
      nodes.push({
        key,
        group: `g${key}`,
        port,
        dataDir,
        stateDir,
        env: {
          SPACE_DATA_DIR: dataDir,
          SPACE_NODE_DIR: join(dataDir, "node"),
          SPACE_INTERNAL_TOKEN: INTERNAL,
          SPACE_BLOB_URL: join(ctlDir, "blobs"),
          SPACE_LOG_LEVEL: process.env.SPACE_LOG_LEVEL ?? "info",
          SPACE_NODE_CONTROL_URL: apiUrl,
          SPACE_NODE_PORT: String(port),
          SPACE_NODE_NAME: `fleet-${key}-${RUN}`,
          SPACE_NODE_GROUP: `g${key}`,
          SPACE_NODE_LABELS: `fleet=${key},run=${RUN}`,
          SPACE_NODE_HEARTBEAT_MS: "1000",
          SPACE_NODE_BRIDGE: `spfl${key}${i}`,
          SPACE_NODE_NFT_TABLE: `space_fleet_${key}`,
          SPACE_NODE_VETH_PREFIX: `f${key}`,
          SPACE_NODE_CGROUP_PARENT: `space-fleet-${key}`,
          SPACE_NODE_RUNTIME_STATE_DIR: stateDir,
          SPACE_NODE_SLOT_CIDR: `10.201.${10 + i}.0/24`,
          SPACE_NODE_MAX_SLOTS: "20",
          SPACE_NODE_BTRFS_IMAGE_GIB: "8",
          SPACE_NODE_DISK_RESERVE_MIB: "1024",
        },
      });
    }
    await Promise.all(nodes.map(startNode));
  });

  after(async () => {
    // Kill what is left, then stop the processes and remove each node's host scope.
    const left = await db?.db
      .query<{ id: string }>(`SELECT id FROM sandboxes WHERE state IN ('running', 'paused')`)
      .catch(() => []);
    for (const s of left ?? [])
      await fetch(`${apiUrl}/sandboxes/${s.id}`, { method: "DELETE", headers: { "x-api-key": apiKey } }).catch(() => {});
    for (const n of nodes) await n.proc?.stop();
    await controller?.stop();
    await api?.stop();
    for (const n of nodes) {
      spawnSync("ip", ["link", "del", n.env.SPACE_NODE_BRIDGE!]);
      for (const family of ["inet", "bridge"]) spawnSync("nft", ["delete", "table", family, n.env.SPACE_NODE_NFT_TABLE!]);
      removeDataDir(n.dataDir);
      spawnSync("rm", ["-rf", n.stateDir]);
    }
    removeDataDir(ctlDir);
    await db?.drop();
  });

  test("both nodes registered with verify; a registration answering with another id is refused (422)", async () => {
    const list = await admin("GET", "/nodes");
    assert.equal(list.status, 200);
    for (const n of nodes) {
      const rec = list.body.nodes.find((x: { name: string }) => x.name === n.env.SPACE_NODE_NAME);
      assert.ok(rec, `node ${n.key} registered: ${JSON.stringify(list.body)}`);
      assert.equal(rec.status, "ready");
      assert.equal(rec.node_group, n.group);
      assert.deepEqual(rec.labels, { fleet: n.key, run: RUN });
      assert.ok(rec.verified_at, "verified");
      assert.equal(rec.address, `http://127.0.0.1:${n.port}`);
      n.id = rec.id;
    }
    const impostor = await admin(
      "POST",
      "/nodes",
      { id: crypto.randomUUID(), name: `impostor-${RUN}`, address: `http://127.0.0.1:${nodes[0]!.port}`, verify: true },
      INTERNAL,
    );
    assert.equal(impostor.status, 422);
    assert.match(impostor.body.message, new RegExp(`answered with id ${nodes[0]!.id}`));
    assert.equal((await admin("GET", "/nodes")).body.nodes.length, 2, "nothing stored for the refused registration");
  });

  test("node_group_boundary_schedules and node_selector_extras_render_and_enforce", async () => {
    for (const n of nodes) {
      for (let i = 0; i < 2; i++) {
        const c = await ecwCreate({ node_group: n.group });
        assert.equal(c.status, 201, JSON.stringify(c.body));
        assert.equal(await nodeOf(c.body.sandboxID), n.id, `sandbox in ${n.group} landed on node ${n.key}`);
      }
    }
    const sel = await ecwCreate({ node_selector: { fleet: "b" } });
    assert.equal(sel.status, 201, JSON.stringify(sel.body));
    assert.equal(await nodeOf(sel.body.sandboxID), nodes[1]!.id);
    const none = await ecwCreate({ node_selector: { fleet: "nowhere" } });
    assert.equal(none.status, 409, JSON.stringify(none.body));
    assert.match(none.body.message, /2 nodes not matching node selector fleet=nowhere/);
    const badGroup = await ecwCreate({ node_group: "gz" });
    assert.match(badGroup.body.message, /2 nodes outside node group gz/);
  });

  test("gentle_drain_leaves_sandbox_resident: new creates avoid the drained node", async () => {
    const [a, b] = nodes as [FleetNode, FleetNode];
    const residents = await db.db.query<{ id: string }>(`SELECT id FROM sandboxes WHERE node_id = $1 AND state = 'running'`, [
      a.id,
    ]);
    assert.ok(residents.length >= 2);
    const d = await admin("POST", `/nodes/${a.id}/drain`, { mode: "gentle" });
    assert.equal(d.status, 200, JSON.stringify(d.body));
    assert.equal(d.body.status, "draining");
    for (let i = 0; i < 3; i++) {
      const c = await ecwCreate();
      assert.equal(c.status, 201, JSON.stringify(c.body));
      assert.equal(await nodeOf(c.body.sandboxID), b.id, "a create without constraints avoids the drained node");
    }
    const inA = await ecwCreate({ node_group: a.group });
    assert.equal(inA.status, 409, JSON.stringify(inA.body));
    assert.match(inA.body.message, /1 node draining/);
    // Residents stay: still running, still answering through the node.
    for (const r of residents) {
      const g = await fetch(`${apiUrl}/sandboxes/${r.id}`, { headers: { "x-api-key": apiKey } });
      assert.equal(g.status, 200);
      assert.equal(((await g.json()) as { state: string }).state, "running");
    }
    const shown = await admin("GET", `/nodes/${a.id}`);
    assert.equal(shown.body.status, "draining");
    assert.equal(shown.body.resident_sandboxes, residents.length);
    // Heartbeats keep the drain.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await admin("GET", `/nodes/${a.id}`)).body.status, "draining");
    assert.equal((await admin("POST", `/nodes/${a.id}/ready`, {})).body.status, "ready");
  });

  test("a node killed with SIGKILL goes unavailable; its sandboxes are reported lost; back, it reclaims them", async () => {
    const b = nodes[1]!;
    const onB = await db.db.query<{ id: string }>(`SELECT id FROM sandboxes WHERE node_id = $1 AND state = 'running'`, [b.id]);
    assert.ok(onB.length > 0);
    await b.proc!.stop("SIGKILL");
    const t0 = Date.now();
    await waitFor(
      async () => (await admin("GET", `/nodes/${b.id}`)).body.status === "unavailable",
      "node b unavailable",
      20_000,
      250,
    );
    const tookMs = Date.now() - t0;
    const rows = await waitFor(
      async () => {
        const r = await db.db.query<{ state: string; reason: string | null }>(
          `SELECT state, failure_message AS reason FROM sandboxes WHERE id = ANY($1::text[])`,
          [onB.map((s) => s.id)],
        );
        return r.every((x) => x.state === "failed") ? r : null;
      },
      "sandboxes of node b reported lost",
      10_000,
      250,
    );
    for (const r of rows) assert.match(r.reason ?? "", /^lost: node fleet-b-.* stopped heartbeating/);
    assert.ok(tookMs < 15_000, `unavailable after ${tookMs} ms`);
    // New work avoids it.
    const c = await ecwCreate();
    assert.equal(c.status, 201);
    assert.equal(await nodeOf(c.body.sandboxID), nodes[0]!.id);
    // Restarted, it registers again and reclaims the lost sandboxes (the control plane no longer wants them).
    await startNode(b);
    await waitFor(async () => (await admin("GET", `/nodes/${b.id}`)).body.status === "ready", "node b ready again", 20_000, 250);
    const ls = spawnSync("runc", ["--root", b.stateDir, "list", "-q"], { encoding: "utf8" });
    for (const s of onB) assert.ok(!ls.stdout.includes(s.id), `lost sandbox ${s.id} reclaimed on restart`);
  });

  test("forced_drain_evacuates_sandbox: file, env and a running process move from A to B with the same id", async () => {
    const [a, b] = nodes as [FleetNode, FleetNode];
    const opts = { apiKey, apiUrl, sandboxUrl: gatewayUrl, requestTimeoutMs: 120_000 };
    const mark = `evac-${randomBytes(4).toString("hex")}`;
    // Unconstrained (so it may land anywhere later), put on A by draining B for the create.
    assert.equal((await admin("POST", `/nodes/${b.id}/drain`, { mode: "gentle" })).status, 200);
    const sb = await Sandbox.create({ ...opts, envs: { EVAC_MARK: mark }, timeoutMs: 170_000 });
    assert.equal((await admin("POST", `/nodes/${b.id}/ready`, {})).body.status, "ready");
    assert.equal(await nodeOf(sb.sandboxId), a.id, "created on node A");
    await sb.files.write("/home/user/evac.txt", mark);
    await sb.commands.run(`nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /home/user/n.tmp; mv -f /home/user/n.tmp /home/user/n; sleep 0.1; done' >/dev/null 2>&1 &`);
    await new Promise((r) => setTimeout(r, 500));
    const before = Number((await sb.files.read("/home/user/n")).trim());
    assert.ok(before > 0, `the loop runs (${before})`);

    const t0 = Date.now();
    const d = await admin("POST", `/nodes/${a.id}/drain`, { mode: "forced" });
    const took = Date.now() - t0;
    assert.equal(d.status, 200, JSON.stringify(d.body));
    assert.equal(d.body.status, "draining");
    assert.equal(d.body.drain_mode, "forced");
    const mine = d.body.evacuation.sandboxes.find((o: { sandbox_id: string }) => o.sandbox_id === sb.sandboxId);
    assert.ok(mine, JSON.stringify(d.body.evacuation));
    assert.equal(mine.outcome, "moved", JSON.stringify(mine));
    assert.equal(mine.to_node_id, b.id);
    assert.equal(await nodeOf(sb.sandboxId), b.id, "the sandbox row points at node B");
    const snap = await db.db.one<{ state: string }>(`SELECT state FROM snapshots WHERE id = $1`, [mine.snapshot_id]);
    assert.equal(snap.state, "durable", "evacuated through the blob store");
    // The earlier residents of A pinned to its group (node_group ga) cannot move: they stay, running on A, with the reason.
    for (const o of d.body.evacuation.sandboxes.filter((x: { sandbox_id: string }) => x.sandbox_id !== sb.sandboxId)) {
      const row = await db.db.one<{ state: string; nodeId: string; metadata: Record<string, string> }>(
        `SELECT state, node_id AS "nodeId", metadata FROM sandboxes WHERE id = $1`,
        [o.sandbox_id],
      );
      assert.equal(row.state, "running", JSON.stringify(o));
      if (o.outcome === "moved") assert.equal(row.nodeId, b.id);
      else {
        assert.equal(o.outcome, "stayed", JSON.stringify(o));
        assert.equal(row.nodeId, a.id);
        assert.match(o.reason, /restore on another node failed: .*node group ga/, JSON.stringify(o));
      }
    }

    // Same id, same handle: running on B, file, env and process memory intact, answers commands.
    const info = await Sandbox.getInfo(sb.sandboxId, opts);
    assert.equal(info.state, "running");
    assert.equal(await sb.files.read("/home/user/evac.txt"), mark);
    assert.equal((await sb.commands.run("echo $EVAC_MARK")).stdout, `${mark}\n`);
    const after1 = Number((await sb.files.read("/home/user/n")).trim());
    await new Promise((r) => setTimeout(r, 400));
    const after2 = Number((await sb.files.read("/home/user/n")).trim());
    assert.ok(after1 >= before && after2 > after1, `the loop kept its count and runs on (${before} → ${after1} → ${after2})`);
    const onA = spawnSync("runc", ["--root", a.stateDir, "list", "-q"], { encoding: "utf8" });
    assert.ok(!onA.stdout.includes(sb.sandboxId), "no longer on node A");
    assert.ok(took < 45_000, `forced drain took ${took} ms`);
    await sb.kill();
    assert.equal((await admin("POST", `/nodes/${a.id}/ready`, {})).body.status, "ready");
  });
});
