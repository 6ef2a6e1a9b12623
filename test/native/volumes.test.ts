/* eslint-disable @typescript-eslint/no-explicit-any -- JSON response bodies of the API under test are read loosely */
/**
 * Native volumes (docs/volumes.md) through `/v1` on PGlite and on real Postgres: the real
 * routes, volume service and dispatcher over the FakeSubstrate (harness.ts). Create and
 * delete are operations with Idempotency-Key; reads name the token and the holders; a
 * create mounts volumes (`volumes: [{name, path, read_only}]`) under the same exclusivity
 * as ECW; bad input is a 4xx naming the value with nothing queued; scopes and tenants.
 */
import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import { testEngines } from "../support/db.ts";
import { createToken } from "../../src/store/tokens.ts";
import { createSandbox, startHarness, type Harness } from "./harness.ts";

const VOL_SCOPES = ["sandboxes:read", "sandboxes:write", "volumes:read", "volumes:write"];

for (const engine of testEngines()) {
  describe(`native volumes on ${engine.name}`, { skip: engine.skip }, () => {
    let h: Harness;
    let a: string;
    let b: string;
    const queued = async () => (await h.db.one<{ n: number }>("SELECT count(*)::int AS n FROM operations")).n;
    const newVolume = async (name: string, token = a) => {
      const r = await h.req("POST", "/v1/volumes", { token, body: { name, size_mib: 64 } });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      const op = await h.waitOp(r.body.id, token);
      assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
      return op.result as { id: string; name: string };
    };

    before(async () => {
      h = await startHarness(engine.name);
      a = (await createToken(h.db, { tenantId: h.tenantA.id, scopes: VOL_SCOPES })).plaintext;
      b = (await createToken(h.db, { tenantId: h.tenantB.id, scopes: VOL_SCOPES })).plaintext;
    });
    after(async () => {
      await h?.close();
    });

    test("create is an operation naming its volume; get (by id or name) hands out the token; list; Idempotency-Key replays", async () => {
      const r = await h.req("POST", "/v1/volumes", { token: a, key: "vol-k1", body: { name: "datasets", size_mib: 128 } });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      assert.equal(r.body.kind, "volume.create");
      assert.match(r.body.target, /^volumes\/vol_[a-z0-9]{16}$/);
      const op = await h.waitOp(r.body.id, a);
      assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
      assert.equal(op.target, `volumes/${op.result.id}`);
      assert.deepEqual({ ...op.result, created_at: typeof op.result.created_at }, { id: op.result.id, name: "datasets", size_mib: 128, node_id: null, created_at: "string" });
      assert.equal(op.result.token, undefined, "an operation's result carries no content token");

      const again = await h.req("POST", "/v1/volumes", { token: a, key: "vol-k1", body: { name: "datasets", size_mib: 128 } });
      assert.equal(again.status, 202);
      assert.equal(again.body.id, r.body.id);
      assert.equal(again.headers["idempotent-replayed"], "true");
      const other = await h.req("POST", "/v1/volumes", { token: a, key: "vol-k1", body: { name: "datasets", size_mib: 256 } });
      assert.equal(other.status, 409);
      assert.equal(other.body.reason, "idempotency_conflict");

      for (const ref of [op.result.id, "datasets"]) {
        const g = await h.req("GET", `/v1/volumes/${ref}`, { token: a });
        assert.equal(g.status, 200, JSON.stringify(g.body));
        assert.equal(g.body.id, op.result.id);
        assert.match(g.body.token, /^vt_/);
        assert.deepEqual(g.body.mounted_by, []);
      }
      const list = await h.req("GET", "/v1/volumes", { token: a });
      assert.equal(list.status, 200);
      assert.deepEqual(list.body.volumes.map((v: any) => [v.name, v.size_mib, v.token]), [["datasets", 128, undefined]]);
    });

    test("bad input is a 4xx naming the value, and nothing is queued", async () => {
      await newVolume("taken");
      const n = await queued();
      for (const [body, status, text] of [
        [{ name: "bad name" }, 400, /volume name "bad name" is not valid/],
        [{ name: "-x" }, 400, /volume name "-x" is not valid/],
        [{ name: "x".repeat(64) }, 400, /volume name "x{64}" is not valid/],
        [{ name: "ok", size_mib: 8 }, 400, /size_mib must be at least 16/],
        [{ name: "ok", size_mib: 1.5 }, 400, /size_mib must be an integer/],
        [{ name: "ok", size_mib: 1e12 }, 400, /size_mib must be at most 16777216/],
        [{ name: "ok", size: 64 }, 400, /size/],
        [{}, 400, /name/],
        [{ name: "taken" }, 409, /volume 'taken' already exists/],
      ] as const) {
        const r = await h.req("POST", "/v1/volumes", { token: a, body });
        assert.equal(r.status, status, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
        assert.match(r.body.message, text);
      }
      for (const [body, status, text] of [
        [{ volumes: [{ name: "taken", path: "etc" }] }, 400, /volume mount path "etc" must be an absolute path/],
        [{ volumes: [{ name: "taken", path: "/proc/x" }] }, 400, /volume mount path \/proc\/x is reserved/],
        [{ volumes: [{ name: "taken", path: "/a" }, { name: "taken", path: "/a", read_only: true }] }, 400, /volume mount path \/a is given twice/],
        [{ volumes: [{ name: "nope", path: "/a" }] }, 404, /volume 'nope' not found/],
        [{ volumes: [{ name: "taken", path: "/a", ro: true }] }, 400, /ro/],
      ] as const) {
        const r = await h.req("POST", "/v1/sandboxes", { token: a, body: { template: "base", ...body } });
        assert.equal(r.status, status, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
        assert.match(r.body.message, text);
      }
      assert.equal((await h.req("DELETE", "/v1/volumes/vol_0000000000000000", { token: a })).status, 404);
      assert.equal(await queued(), n, "nothing was queued");
    });

    test("scopes: volumes:read reads, volumes:write mutates; a sandboxes-only token is refused naming the scope", async () => {
      const ro = (await createToken(h.db, { tenantId: h.tenantA.id, scopes: ["volumes:read"] })).plaintext;
      assert.equal((await h.req("GET", "/v1/volumes", { token: ro })).status, 200);
      const w = await h.req("POST", "/v1/volumes", { token: ro, body: { name: "nope" } });
      assert.equal(w.status, 403);
      assert.match(w.body.message, /missing scope volumes:write/);
      const l = await h.req("GET", "/v1/volumes", { token: h.tokens.a });
      assert.equal(l.status, 403);
      assert.match(l.body.message, /missing scope volumes:read/);
    });

    test("mounts at create: the sandbox shows them; read-write is exclusive; delete in use is 409 at once, then an operation once free", async () => {
      const vol = await newVolume("work");
      const sid = await createSandbox(h, { volumes: [{ name: "work", path: "/mnt/work" }] }, a);
      const sb = await h.req("GET", `/v1/sandboxes/${sid}`, { token: a });
      assert.deepEqual(sb.body.volumes, [{ name: "work", path: "/mnt/work", read_only: false }]);
      const held = await h.req("GET", "/v1/volumes/work", { token: a });
      assert.deepEqual(held.body.mounted_by, [{ sandbox_id: sid, read_only: false }]);
      assert.equal(held.body.node_id, sb.body.node_id, "the volume is placed where its first sandbox runs");

      for (const read_only of [false, true]) {
        const r = await h.req("POST", "/v1/sandboxes", { token: a, body: { template: "base", volumes: [{ name: "work", path: "/w", read_only }] } });
        assert.equal(r.status, 202);
        const op = await h.waitOp(r.body.id, a);
        assert.equal(op.state, "failed");
        assert.equal(op.failure.code, "conflict");
        assert.match(op.failure.message, new RegExp(`volume 'work' is mounted( read-write)? by sandbox ${sid}`));
      }
      const busy = await h.req("DELETE", `/v1/volumes/${vol.id}`, { token: a });
      assert.equal(busy.status, 409);
      assert.match(busy.body.message, new RegExp(`volume ${vol.id} is in use by sandbox ${sid}`));

      const kill = await h.req("DELETE", `/v1/sandboxes/${sid}`, { token: a });
      assert.equal((await h.waitOp(kill.body.id, a)).state, "succeeded");
      const del = await h.req("DELETE", `/v1/volumes/${vol.id}`, { token: a, key: "vol-del-1" });
      assert.equal(del.status, 202);
      assert.equal(del.body.kind, "volume.delete");
      const op = await h.waitOp(del.body.id, a);
      assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
      assert.deepEqual(op.result, { id: vol.id, deleted: true });
      assert.ok(h.substrate.calls.includes(`drop volume ${vol.id} on ${held.body.node_id}`), h.substrate.calls.join("\n"));
      assert.equal((await h.req("GET", `/v1/volumes/${vol.id}`, { token: a })).status, 404);
      // A retried delete with its key replays the operation, though the volume is gone.
      const replay = await h.req("DELETE", `/v1/volumes/${vol.id}`, { token: a, key: "vol-del-1" });
      assert.equal(replay.status, 202);
      assert.equal(replay.body.id, del.body.id);
    });

    test("another tenant cannot see, delete or mount a volume (404)", async () => {
      const vol = await newVolume("private");
      assert.deepEqual((await h.req("GET", "/v1/volumes", { token: b })).body.volumes, []);
      for (const ref of [vol.id, "private"]) assert.equal((await h.req("GET", `/v1/volumes/${ref}`, { token: b })).status, 404);
      assert.equal((await h.req("DELETE", `/v1/volumes/${vol.id}`, { token: b })).status, 404);
      const m = await h.req("POST", "/v1/sandboxes", { token: b, body: { template: "base", volumes: [{ name: "private", path: "/p" }] } });
      assert.equal(m.status, 404);
      assert.match(m.body.message, /volume 'private' not found/);
      // B may have its own volume of that name.
      assert.equal((await newVolume("private", b)).name, "private");
    });
  });
}
