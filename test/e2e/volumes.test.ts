/**
 * Volumes end to end (issue 26, docs/volumes.md): the real stack (`space up`, runc, btrfs)
 * driven by the unmodified e2b SDK: `Volume.create`, the volume content API with the
 * volume's own token (E2B_VOLUME_API_URL → the API), mounts at create, data that outlives
 * a sandbox, read-only sharing, the exclusive read-write mount, deleting a volume in use,
 * tenant isolation and the volume quota; Native mounts (`volumes` on `/v1/sandboxes`) seen
 * through both APIs. Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Sandbox, Volume, VolumeError, VolumePathNotFoundError, type ConnectionOpts } from "e2b";
import { adminRequest, startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

describe("volumes with the e2b SDK", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  const created: Sandbox[] = [];
  const volumes: { id: string; o: ConnectionOpts }[] = [];
  const create = async (mounts: Record<string, Volume | string>, o: ConnectionOpts = opts) => {
    const sb = await Sandbox.create({ ...opts, ...o, volumeMounts: mounts });
    created.push(sb);
    return sb;
  };
  const newVolume = async (o: ConnectionOpts = opts) => {
    const v = await Volume.create(`v-${randomBytes(4).toString("hex")}`, o);
    volumes.push({ id: v.volumeId, o });
    return v;
  };

  before(async () => {
    stack = await startStack({ env: { SPACE_VOLUME_DEFAULT_MIB: "64" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 } as ConnectionOpts & { sandboxUrl: string };
    // The content API is served by `space api` itself: the SDK is pointed at it as at E2B's.
    process.env.E2B_VOLUME_API_URL = stack.apiUrl;
  });
  after(async () => {
    await Promise.allSettled(created.map((s) => s.kill()));
    for (const v of volumes) await Volume.destroy(v.id, v.o).catch(() => undefined);
    await stack?.stop();
    delete process.env.E2B_VOLUME_API_URL;
  });

  test("Volume.create, list, getInfo; a file written through the content API is read in a sandbox that mounts it", async () => {
    const vol = await newVolume();
    assert.match(vol.volumeId, /^vol_[a-z0-9]{16}$/);
    assert.ok(vol.token && vol.token.length > 20);
    assert.ok((await Volume.list(opts)).some((v) => v.volumeId === vol.volumeId && v.name === vol.name));
    const info = await Volume.getInfo(vol.volumeId, opts);
    assert.equal(info.name, vol.name);
    assert.equal(info.token, vol.token);

    await vol.writeFile("/docs/hello.txt", "hello from the volume API", { force: true });
    assert.equal(await vol.readFile("/docs/hello.txt"), "hello from the volume API");
    assert.deepEqual((await vol.list("/docs")).map((e) => [e.name, e.type, e.size]), [["hello.txt", "file", 25]]);
    assert.equal(await vol.exists("/docs/nope.txt"), false);
    await assert.rejects(vol.readFile("/docs/nope.txt"), VolumePathNotFoundError);
    await assert.rejects(vol.readFile("/../etc/passwd"), VolumeError);

    const sb = await create({ "/mnt/data": vol });
    // The SDK shows the mounts in getInfo and in the list, from what was stored at create.
    assert.deepEqual((await sb.getInfo()).volumeMounts, [{ name: vol.name, path: "/mnt/data" }]);
    const listed = await Sandbox.list({ ...opts, limit: 100 }).nextItems();
    assert.deepEqual(listed.find((i) => i.sandboxId === sb.sandboxId)?.volumeMounts, [{ name: vol.name, path: "/mnt/data" }]);
    const r = await sb.commands.run("cat /mnt/data/docs/hello.txt");
    assert.equal(r.stdout, "hello from the volume API");
    // The sandbox's user owns what the API wrote, and may write beside it.
    await sb.commands.run("echo from-sandbox > /mnt/data/docs/back.txt");
    assert.equal(await vol.readFile("/docs/back.txt"), "from-sandbox\n");
  });

  test("a file written in one sandbox is there in the next after a kill", async () => {
    const vol = await newVolume();
    const first = await create({ "/data": vol });
    const payload = randomBytes(16).toString("hex");
    await first.commands.run(`mkdir -p /data/a && echo ${payload} > /data/a/kept.txt`);
    await first.kill();
    const second = await create({ "/data": vol.name });
    assert.equal((await second.commands.run("cat /data/a/kept.txt")).stdout, `${payload}\n`);
    // The sandbox's own disk is new: only the volume carried over.
    assert.equal((await second.commands.run("ls /data/a")).stdout, "kept.txt\n");
  });

  test("two read-only mounts at once; a read-write mount while another holds it is refused; deleting it in use is refused", async () => {
    const vol = await newVolume();
    await vol.writeFile("shared.txt", "shared");
    const a = await create({ "/ro": `${vol.name}:ro` });
    const b = await create({ "/ro": `${vol.name}:ro` });
    for (const sb of [a, b]) assert.equal((await sb.commands.run("cat /ro/shared.txt")).stdout, "shared");
    // A read-only mount is answered as it was asked for: the name with `:ro`.
    assert.deepEqual((await a.getInfo()).volumeMounts, [{ name: `${vol.name}:ro`, path: "/ro" }]);
    const w = await a.commands.run("echo x > /ro/new.txt", { user: "root" }).catch((e: { stderr?: string }) => e);
    assert.match(String((w as { stderr?: string }).stderr), /Read-only file system/);

    await assert.rejects(create({ "/rw": vol }), (e: Error) => /mounted by sandbox/.test(e.message));
    const del = await fetch(`${stack.apiUrl}/volumes/${vol.volumeId}`, { method: "DELETE", headers: { "x-api-key": stack.apiKey } });
    assert.equal(del.status, 409);
    assert.match(((await del.json()) as { message: string }).message, /in use by sandbox/);

    await a.kill();
    await b.kill();
    const rw = await create({ "/rw": vol });
    assert.equal((await rw.commands.run("cat /rw/shared.txt")).stdout, "shared");
    await assert.rejects(create({ "/ro": `${vol.name}:ro` }), (e: Error) => /mounted read-write by sandbox/.test(e.message));
    await rw.kill();
    assert.equal(await Volume.destroy(vol.volumeId, opts), true);
    assert.equal(await Volume.destroy(vol.volumeId, opts), false);
    await assert.rejects(vol.readFile("shared.txt"), VolumeError);
  });

  test("another tenant cannot see, open or mount a volume (404), and the volume quota holds", async () => {
    const vol = await newVolume();
    await vol.writeFile("secret.txt", "tenant-a");
    const t = await adminRequest(stack, "POST", "/tenants", { name: `volumes-${randomBytes(3).toString("hex")}` });
    const id = t.body.id as string;
    const k = await adminRequest(stack, "POST", `/tenants/${id}/keys`, {});
    const q = await adminRequest(stack, "PUT", `/tenants/${id}/quotas`, { volumes: 1 });
    assert.equal(q.status, 200, JSON.stringify(q.body));
    const other = { ...opts, apiKey: k.body.key as string };

    assert.equal((await Volume.list(other)).length, 0);
    await assert.rejects(Volume.getInfo(vol.volumeId, other), (e: Error) => e.constructor.name === "VolumeNotFoundError");
    assert.equal(await Volume.destroy(vol.volumeId, other), false);
    await assert.rejects(create({ "/x": vol.name }, other), (e: Error) => /not found/.test(e.message));
    // A token of another volume does not open this one.
    const mine = await newVolume(other);
    const forged = new Volume(vol.volumeId, vol.name, mine.token);
    await assert.rejects(forged.readFile("secret.txt"), (e: Error) => /not found/i.test(e.message));
    // Its quota: one volume.
    await assert.rejects(Volume.create("second", other), (e: Error) => /quota exceeded: volumes 1 of 1/.test(e.message));
    assert.equal(await vol.readFile("secret.txt"), "tenant-a");
  });

  test("Native: a create mounts a volume read-only (volumes: [{name, path, read_only}]) and shows it; the SDK sees it too", async () => {
    const vol = await newVolume();
    await vol.writeFile("n.txt", "from-native");
    const native = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${stack.apiUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${stack.apiKey}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: r.status, body: (await r.json()) as Record<string, any> }; // eslint-disable-line @typescript-eslint/no-explicit-any -- the API's JSON answer
    };
    const c = await native("POST", "/v1/sandboxes", { template: "base", timeout_s: 600, volumes: [{ name: vol.name, path: "/mnt/n", read_only: true }] });
    assert.equal(c.status, 202, JSON.stringify(c.body));
    let op = c.body;
    while (op.state !== "succeeded" && op.state !== "failed") op = (await native("GET", `/v1/operations/${c.body.id}?wait=30s`)).body;
    assert.equal(op.state, "succeeded", JSON.stringify(op.failure));
    const sb = await Sandbox.connect(op.result.id as string, opts);
    created.push(sb);
    assert.deepEqual((await native("GET", `/v1/sandboxes/${sb.sandboxId}`)).body.volumes, [{ name: vol.name, path: "/mnt/n", read_only: true }]);
    assert.deepEqual((await sb.getInfo()).volumeMounts, [{ name: `${vol.name}:ro`, path: "/mnt/n" }]);
    assert.equal((await sb.commands.run("cat /mnt/n/n.txt")).stdout, "from-native");
    const held = await native("GET", `/v1/volumes/${vol.name}`);
    assert.deepEqual(held.body.mounted_by, [{ sandbox_id: sb.sandboxId, read_only: true }]);
    // ECW's create refuses a bad name naming it (400, never 5xx).
    for (const name of ["x".repeat(64), "a b"]) {
      const r = await fetch(`${stack.apiUrl}/volumes`, { method: "POST", headers: { "x-api-key": stack.apiKey, "content-type": "application/json" }, body: JSON.stringify({ name }) });
      assert.equal(r.status, 400);
      assert.ok(((await r.json()) as { message: string }).message.includes(`volume name ${JSON.stringify(name)} is not valid`));
    }
  });
});
