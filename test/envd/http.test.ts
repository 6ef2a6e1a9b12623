import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream, existsSync, readFileSync, rmSync, statSync, mkdirSync } from "node:fs";
import { request } from "node:http";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { gunzipSync, gzipSync } from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import { signature } from "../../src/envd/request-auth.ts";
import { ensureTestUser, startEnvd, TEST_USER, waitFor, type RunningEnvd } from "./harness.ts";

const UNAUTH = { code: 401, message: "unauthorized access, please provide a valid access token or method signing if supported" };

describe("envd HTTP", () => {
  let envd: RunningEnvd;
  let user: ReturnType<typeof ensureTestUser>;
  let base: string;
  before(async () => {
    user = ensureTestUser();
    envd = await startEnvd({ bundle: true, env: { SANDBOX_VAR: "from-env", SPACE_ENVD_SECRET_KNOB: "hidden" } });
    base = join(user.home, `http-${process.pid}`);
  });
  after(async () => {
    await envd?.stop();
    rmSync(base, { recursive: true, force: true });
  });

  test("health 204, unknown route 404 JSON", async () => {
    assert.equal((await fetch(`${envd.url}/health`)).status, 204);
    const r = await fetch(`${envd.url}/nope`);
    assert.equal(r.status, 404);
    assert.equal(((await r.json()) as { code: number }).code, 404);
  });

  test("multipart upload: parents created, owned by the user, metadata in the answer; read back", async () => {
    const form = new FormData();
    form.append("file", new Blob(["hello multipart"]), `http-${process.pid}/deep/dir/m.txt`);
    form.append("file", new Blob(["second"]), join(base, "second.txt"));
    const r = await fetch(`${envd.url}/files`, { method: "POST", body: form, headers: { "X-Metadata-Owner-Team": "Blue" } });
    assert.equal(r.status, 200);
    const body = (await r.json()) as { path: string; name: string; type: string }[];
    assert.deepEqual(body, [
      { path: join(base, "deep/dir/m.txt"), name: "m.txt", type: "file", metadata: { "owner-team": "Blue" } },
      { path: join(base, "second.txt"), name: "second.txt", type: "file", metadata: { "owner-team": "Blue" } },
    ]);
    assert.equal(readFileSync(join(base, "deep/dir/m.txt"), "utf8"), "hello multipart");
    for (const p of [base, join(base, "deep"), join(base, "deep/dir"), join(base, "deep/dir/m.txt")]) {
      assert.equal(statSync(p).uid, user.uid, p);
    }
    const st = await envd.fs().stat({ path: join(base, "deep/dir/m.txt") });
    assert.deepEqual(st.entry!.metadata, { "owner-team": "Blue" });
    assert.equal(st.entry!.owner, TEST_USER);

    const g = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(base, "deep/dir/m.txt"))}`, {
      headers: { "accept-encoding": "identity" },
    });
    assert.equal(g.status, 200);
    assert.equal(await g.text(), "hello multipart");
    // Path query overrides the part's filename.
    const f2 = new FormData();
    f2.append("file", new Blob(["override"]), "ignored-name");
    const r2 = await fetch(`${envd.url}/files?path=${encodeURIComponent(`~/http-${process.pid}/o.txt`)}`, {
      method: "POST",
      body: f2,
    });
    assert.equal(((await r2.json()) as { path: string }[])[0]!.path, join(base, "o.txt"));
  });

  test("metadata: user.e2b.* xattrs on the file, replaced by each upload, 400 for a bad value", async () => {
    const p = join(base, "meta.txt");
    const post = (headers: Record<string, string>) =>
      fetch(`${envd.url}/files?path=${encodeURIComponent(p)}`, {
        method: "POST",
        headers: { "content-type": "application/octet-stream", ...headers },
        body: "m",
      });
    const xattrs = () =>
      spawnSync(
        "python3",
        ["-c", "import os,sys; print(sorted((n, os.getxattr(sys.argv[1], n).decode()) for n in os.listxattr(sys.argv[1])))", p],
        { encoding: "utf8" },
      ).stdout.trim();
    const r = await post({ "X-Metadata-A": "1", "X-Metadata-b": "two words" });
    assert.deepEqual(await r.json(), [{ path: p, name: "meta.txt", type: "file", metadata: { a: "1", b: "two words" } }]);
    assert.equal(xattrs(), "[('user.e2b.a', '1'), ('user.e2b.b', 'two words')]");
    const again = await post({ "X-Metadata-B": "only" });
    assert.deepEqual(((await again.json()) as { metadata?: unknown }[])[0]!.metadata, { b: "only" });
    const none = await post({});
    assert.deepEqual(await none.json(), [{ path: p, name: "meta.txt", type: "file" }]);
    assert.equal(xattrs(), "[]");
    assert.deepEqual((await envd.fs().stat({ path: p })).entry!.metadata, {});
    // Set on the file directly (as setfattr in a sandbox would), it is metadata too; other namespaces are not.
    spawnSync("python3", [
      "-c",
      "import os,sys; os.setxattr(sys.argv[1], 'user.e2b.k', b'v'); os.setxattr(sys.argv[1], 'user.other', b'x')",
      p,
    ]);
    assert.deepEqual((await envd.fs().stat({ path: p })).entry!.metadata, { k: "v" });

    const bad = await post({ "X-Metadata-K": "caf\xe9" });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /X-Metadata-k/);
    const huge = await post({ "X-Metadata-Big": "x".repeat(5000) });
    assert.equal(huge.status, 400);
    assert.match(((await huge.json()) as { message: string }).message, /exceeds 4096 bytes/);
  });

  test("octet-stream upload with gzip; gzip download; empty file; 404 body; root user", async () => {
    const p = join(base, "raw.bin");
    const data = randomBytes(300_000);
    const r = await fetch(`${envd.url}/files?path=${encodeURIComponent(p)}`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream", "content-encoding": "gzip" },
      body: gzipSync(data),
    });
    assert.equal(r.status, 200);
    assert.ok(readFileSync(p).equals(data));
    const gz = await new Promise<{ enc: string | undefined; body: Buffer }>((resolve, reject) => {
      request(`${envd.url}/files?path=${encodeURIComponent(p)}`, { headers: { "accept-encoding": "gzip" } }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ enc: res.headers["content-encoding"], body: Buffer.concat(chunks) }));
      })
        .on("error", reject)
        .end();
    });
    assert.equal(gz.enc, "gzip");
    assert.ok(gunzipSync(gz.body).equals(data));

    const e = join(base, "empty");
    await fetch(`${envd.url}/files?path=${encodeURIComponent(e)}`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream" },
      body: "",
    });
    const ge = await fetch(`${envd.url}/files?path=${encodeURIComponent(e)}`, { headers: { "accept-encoding": "identity" } });
    assert.equal(ge.headers.get("content-length"), "0");

    const nf = await fetch(`${envd.url}/files?path=/definitely/not/here`);
    assert.equal(nf.status, 404);
    const nb = (await nf.json()) as { code: number; message: string };
    assert.equal(nb.code, 404);
    assert.match(nb.message, /not\/here/);

    const rootFile = join(base, "rootowned");
    await fetch(`${envd.url}/files?path=${encodeURIComponent(rootFile)}&username=root`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream" },
      body: "r",
    });
    assert.equal(statSync(rootFile).uid, 0);
    const dirRead = await fetch(`${envd.url}/files?path=${encodeURIComponent(base)}`);
    assert.equal(dirRead.status, 400);
  });

  test("100 MiB round trip byte-exact (octet-stream up, raw down)", async () => {
    const src = `/tmp/envd-100m-${process.pid}`;
    const back = `/tmp/envd-100m-back-${process.pid}`;
    try {
      await pipeline(createReadStream("/dev/urandom", { end: 100 * 1024 * 1024 - 1 }), createWriteStream(src));
      const want = createHash("sha256").update(readFileSync(src)).digest("hex");
      const target = join(base, "big.bin");
      const up = await new Promise<number>((resolve, reject) => {
        const req = request(
          `${envd.url}/files?path=${encodeURIComponent(target)}`,
          {
            method: "POST",
            headers: { "content-type": "application/octet-stream" },
          },
          (res) => {
            res.resume();
            res.on("end", () => resolve(res.statusCode ?? 0));
          },
        );
        req.on("error", reject);
        createReadStream(src).pipe(req);
      });
      assert.equal(up, 200);
      await new Promise<void>((resolve, reject) => {
        request(`${envd.url}/files?path=${encodeURIComponent(target)}`, (res) => {
          pipeline(res, createWriteStream(back)).then(resolve, reject);
        })
          .on("error", reject)
          .end();
      });
      assert.equal(createHash("sha256").update(readFileSync(back)).digest("hex"), want);
    } finally {
      rmSync(src, { force: true });
      rmSync(back, { force: true });
    }
  });

  test("envs, metrics, init", async () => {
    const envs = (await (await fetch(`${envd.url}/envs`)).json()) as Record<string, string>;
    assert.equal(envs.SANDBOX_VAR, "from-env");
    assert.equal(envs.SPACE_ENVD_SECRET_KNOB, undefined);
    const m = (await (await fetch(`${envd.url}/metrics`)).json()) as Record<string, number>;
    for (const k of ["ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "disk_used", "disk_total"]) {
      assert.equal(typeof m[k], "number", k);
    }
    const init = await fetch(`${envd.url}/init`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ envVars: { INIT_VAR: "set-by-init" } }),
    });
    assert.equal(init.status, 204);
    let out = "";
    for await (const msg of envd
      .process()
      .start({ process: { cmd: "/bin/sh", args: ["-c", "echo $INIT_VAR $SANDBOX_VAR"], envs: {} } })) {
      const e = msg.event!.event;
      if (e.case === "data") out += Buffer.from(e.value.output.value!).toString();
    }
    assert.equal(out, "set-by-init from-env\n");
    const bad = await fetch(`${envd.url}/init`, { method: "POST", body: "{not json" });
    assert.equal(bad.status, 400);
    // A body of the wrong shape is refused whole, naming the field; nothing of it is applied.
    const wrong = await fetch(`${envd.url}/init`, { method: "POST", body: JSON.stringify({ envVars: { INIT_VAR: 7, OTHER: "x" } }) });
    assert.equal(wrong.status, 400);
    assert.match(await wrong.text(), /envVars/);
    const after = (await (await fetch(`${envd.url}/envs`)).json()) as Record<string, string>;
    assert.equal(after.INIT_VAR, "set-by-init");
    assert.equal(after.OTHER, undefined);
  });

  test("access token: 401 body, Connect unauthenticated, signed URLs", async () => {
    const token = "tok-" + randomBytes(8).toString("hex");
    const r = await fetch(`${envd.url}/init`, { method: "POST", body: JSON.stringify({ accessToken: token }) });
    assert.equal(r.status, 204);
    try {
      assert.equal((await fetch(`${envd.url}/health`)).status, 204);
      const e = await fetch(`${envd.url}/envs`);
      assert.equal(e.status, 401);
      assert.deepEqual(await e.json(), UNAUTH);
      assert.equal((await fetch(`${envd.url}/envs`, { headers: { "x-access-token": token } })).status, 200);
      await assert.rejects(envd.fs().stat({ path: "/" }), (x: unknown) => {
        assert.equal(ConnectError.from(x).code, Code.Unauthenticated);
        return true;
      });
      await envd.fs({ token }).stat({ path: "/" });

      const path = join(base, "signed.txt");
      const noSig = await fetch(`${envd.url}/files?path=${encodeURIComponent(path)}`);
      assert.equal(noSig.status, 401);
      assert.deepEqual(await noSig.json(), { code: 401, message: "missing signature query parameter" });
      // write with a signed URL (username in the signature and the query)
      const wsig = signature(path, "write", TEST_USER, token);
      const w = await fetch(
        `${envd.url}/files?path=${encodeURIComponent(path)}&username=${TEST_USER}&signature=${encodeURIComponent(wsig)}`,
        {
          method: "POST",
          headers: { "content-type": "application/octet-stream" },
          body: "signed",
        },
      );
      assert.equal(w.status, 200);
      const exp = Math.floor(Date.now() / 1000) + 60;
      const rsig = signature(path, "read", "", token, exp);
      const rd = await fetch(
        `${envd.url}/files?path=${encodeURIComponent(path)}&signature=${encodeURIComponent(rsig)}&signature_expiration=${exp}`,
      );
      assert.equal(await rd.text(), "signed");
      const wrongOp = await fetch(
        `${envd.url}/files?path=${encodeURIComponent(path)}&signature=${encodeURIComponent(wsig)}&username=${TEST_USER}`,
      );
      assert.deepEqual(await wrongOp.json(), { code: 401, message: "invalid signature" });
      const old = Math.floor(Date.now() / 1000) - 5;
      const osig = signature(path, "read", "", token, old);
      const expired = await fetch(
        `${envd.url}/files?path=${encodeURIComponent(path)}&signature=${encodeURIComponent(osig)}&signature_expiration=${old}`,
      );
      assert.deepEqual(await expired.json(), { code: 401, message: "signature is already expired" });
      // The token header also works for files.
      const withToken = await fetch(`${envd.url}/files?path=${encodeURIComponent(path)}`, {
        headers: { "x-access-token": token },
      });
      assert.equal(withToken.status, 200);
    } finally {
      const reset = await fetch(`${envd.url}/init`, {
        method: "POST",
        headers: { "x-access-token": token },
        body: JSON.stringify({ accessToken: "" }),
      });
      assert.equal(reset.status, 204);
    }
  });

  test("507 when the disk is full", async () => {
    const mnt = `/tmp/envd-full-${process.pid}`;
    mkdirSync(mnt, { recursive: true });
    const m = spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt]);
    if (m.status !== 0) return; // no mount privilege: nothing to check here
    try {
      const r = await fetch(`${envd.url}/files?path=${mnt}/big&username=root`, {
        method: "POST",
        headers: { "content-type": "application/octet-stream" },
        body: randomBytes(3 * 1024 * 1024),
      });
      assert.equal(r.status, 507);
      assert.equal(((await r.json()) as { code: number }).code, 507);
      assert.equal(existsSync(`${mnt}/big`), false, "no truncated file left behind");
    } finally {
      spawnSync("umount", [mnt]);
      rmSync(mnt, { recursive: true, force: true });
    }
  });

  test("a bad path at the head of a large upload: 400 with the body read and dropped, not a reset connection", async () => {
    const boundary = "bnd";
    const head = `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="x"\r\ncontent-type: application/octet-stream\r\n\r\n`;
    const body = Buffer.concat([Buffer.from(head), randomBytes(8 * 1024 * 1024), Buffer.from(`\r\n--${boundary}--\r\n`)]);
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${envd.url}/files?path=${encodeURIComponent("/tmp/a\0b")}&username=root`, {
        method: "POST",
        headers: { "content-type": `multipart/form-data; boundary=${boundary}` },
        body,
      });
      assert.equal(r.status, 400);
      assert.match(((await r.json()) as { message: string }).message, /NUL/);
    }
  });

  test("an upload its client cuts short leaves no file behind, and envd goes on", async () => {
    mkdirSync(base, { recursive: true });
    const target = join(base, "cut-short");
    const req = request(`${envd.url}/files?path=${encodeURIComponent(target)}&username=root`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream", "content-length": String(16 * 1024 * 1024) },
    });
    req.on("error", () => undefined);
    req.write(randomBytes(1024 * 1024));
    await waitFor(() => existsSync(target), 5000, "the upload under way");
    req.destroy();
    await waitFor(() => !existsSync(target), 5000, "the partial file removed");
    assert.equal((await fetch(`${envd.url}/health`)).status, 204);
  });

  test("path tricks over HTTP stay inside the sandbox root and do not crash", async () => {
    mkdirSync(base, { recursive: true });
    const r = await fetch(`${envd.url}/files?path=${encodeURIComponent("../../../../etc/hostname")}`);
    assert.ok([200, 404].includes(r.status));
    const bad = await fetch(`${envd.url}/files`, {
      method: "POST",
      headers: { "content-type": "multipart/form-data; boundary=xyz" },
      body: "--xyz\r\ngarbage",
    });
    assert.equal(bad.status, 400);
    assert.equal((await fetch(`${envd.url}/health`)).status, 204);
  });
});
