// One conformance suite for every BlobStore backend (fs, S3 via a real s3rver).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm, readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { SpaceError } from "../../src/core/errors.ts";
import { checkBlobKey, type BlobStore } from "../../src/blob/blob-store.ts";
import { FsBlobStore } from "../../src/blob/fs/fs-blob-store.ts";
import { S3BlobStore } from "../../src/blob/s3/s3-blob-store.ts";
import { openBlobStore } from "../../src/blob/open.ts";
import { HeadObjectCommand } from "@aws-sdk/client-s3";
import { startS3Server, type TestS3Server } from "../support/s3.ts";

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
async function readAll(r: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of r) parts.push(Buffer.from(c as Uint8Array));
  return Buffer.concat(parts);
}
/** A stream of `total` random bytes in irregular chunk sizes (exercises re-chunking). */
function randomStream(total: number): { stream: Readable; bytes: Buffer } {
  const bytes = randomBytes(total);
  const chunks: Buffer[] = [];
  for (let off = 0, i = 0; off < total; i++) {
    const n = Math.min(total - off, 1 + ((i * 7919) % 300_000));
    chunks.push(bytes.subarray(off, off + n));
    off += n;
  }
  return { stream: Readable.from(chunks), bytes };
}
const isCode = (code: string) => (e: unknown) => e instanceof SpaceError && e.code === code;

interface Backend {
  name: string;
  setup(): Promise<{ store: BlobStore; teardown(): Promise<void> }>;
}

let s3: TestS3Server | undefined;
const s3Prefix = `run-${randomBytes(4).toString("hex")}/blobs`;
const backends: Backend[] = [
  {
    name: "fs",
    async setup() {
      const dir = await mkdtemp(join(tmpdir(), "space-blob-"));
      const store = new FsBlobStore(dir);
      return {
        store,
        async teardown() {
          // No temp files left behind by puts.
          const tmp = await readdir(join(dir, ".tmp")).catch(() => []);
          assert.deepEqual(tmp, [], "fs store left temp files");
          await rm(dir, { recursive: true, force: true });
        },
      };
    },
  },
  {
    name: "s3",
    async setup() {
      s3 ??= await startS3Server({ buckets: ["space-test"] });
      const store = new S3BlobStore({ ...s3.clientOptions, bucket: "space-test", prefix: s3Prefix, partSizeBytes: 5 * 1024 * 1024 });
      return { store, teardown: () => store.close() };
    },
  },
];

after(async () => {
  await s3?.stop();
});

for (const backend of backends) {
  describe(`BlobStore conformance: ${backend.name}`, () => {
    let store: BlobStore;
    let teardown: () => Promise<void>;
    before(async () => {
      ({ store, teardown } = await backend.setup());
    });
    after(async () => {
      await teardown();
    });

    it("put/get/head round trip with size and sha256", async () => {
      const body = Buffer.from("hello blob\n");
      const info = await store.put("a/b/hello.txt", Readable.from([body]));
      assert.deepEqual(info, { key: "a/b/hello.txt", sizeBytes: body.length, sha256: sha(body) });
      assert.deepEqual(await readAll(await store.get("a/b/hello.txt")), body);
      assert.deepEqual(await store.head("a/b/hello.txt"), info);
    });

    it("accepts a Uint8Array body and an empty body", async () => {
      const info = await store.put("bytes/one", new Uint8Array([1, 2, 3]));
      assert.equal(info.sizeBytes, 3);
      const empty = await store.put("bytes/empty", Readable.from([]));
      assert.deepEqual(empty, { key: "bytes/empty", sizeBytes: 0, sha256: sha(Buffer.alloc(0)) });
      assert.equal((await readAll(await store.get("bytes/empty"))).length, 0);
      assert.deepEqual(await store.head("bytes/empty"), empty);
    });

    it("put replaces an existing object (and its checksum)", async () => {
      await store.put("replace/x", Readable.from([Buffer.from("first")]));
      const second = await store.put("replace/x", Readable.from([Buffer.from("second version")]));
      assert.equal((await readAll(await store.get("replace/x"))).toString(), "second version");
      assert.deepEqual(await store.head("replace/x"), second);
    });

    it("missing key: get → not_found, head → null, delete → ok", async () => {
      await assert.rejects(store.get("nope/missing"), isCode("not_found"));
      assert.equal(await store.head("nope/missing"), null);
      await store.delete("nope/missing");
    });

    it("delete removes the object; deleting twice is fine", async () => {
      await store.put("del/me", Readable.from([Buffer.from("x")]));
      await store.delete("del/me");
      assert.equal(await store.head("del/me"), null);
      await assert.rejects(store.get("del/me"), isCode("not_found"));
      await store.delete("del/me");
    });

    it("list by prefix returns matching keys sorted, no bookkeeping files", async () => {
      for (const k of ["ls/b/2", "ls/a/1", "ls/a/2", "ls/ab", "lsx/other"]) await store.put(k, Readable.from([Buffer.from(k)]));
      assert.deepEqual(await store.list("ls/"), ["ls/a/1", "ls/a/2", "ls/ab", "ls/b/2"]);
      assert.deepEqual(await store.list("ls/a"), ["ls/a/1", "ls/a/2", "ls/ab"]);
      assert.deepEqual(await store.list("ls/a/"), ["ls/a/1", "ls/a/2"]);
      assert.deepEqual(await store.list("ls/zzz"), []);
      const all = await store.list("");
      assert.ok(all.includes("lsx/other") && all.includes("ls/ab"));
      assert.ok(all.every((k) => !k.split("/").some((s) => s.startsWith("."))), `bookkeeping leaked into list: ${all.join(",")}`);
    });

    it("20 MiB+ object round trips byte-exact (multipart on S3)", { timeout: 120_000 }, async () => {
      const total = 21 * 1024 * 1024 + 12345;
      const { stream, bytes } = randomStream(total);
      const info = await store.put("big/object.bin", stream);
      assert.equal(info.sizeBytes, total);
      assert.equal(info.sha256, sha(bytes));
      const back = await readAll(await store.get("big/object.bin"));
      assert.equal(back.length, total);
      assert.ok(back.equals(bytes), "content differs");
      assert.deepEqual(await store.head("big/object.bin"), info);
      assert.deepEqual(await store.list("big/"), ["big/object.bin"]);
      if (store instanceof S3BlobStore) {
        // Only multipart uploads write a checksum sidecar: prove the multipart path ran.
        const h = await store.client.send(new HeadObjectCommand({ Bucket: "space-test", Key: `${s3Prefix}/.meta/big/object.bin.json` }));
        assert.ok((h.ContentLength ?? 0) > 0, "no multipart sidecar");
      }
      // A small put over a multipart object takes the metadata path and stays consistent.
      const small = await store.put("big/object.bin", new Uint8Array([9]));
      assert.deepEqual(await store.head("big/object.bin"), small);
      await store.delete("big/object.bin");
      assert.equal(await store.head("big/object.bin"), null);
    });

    it("refuses bad keys with invalid_argument", async () => {
      for (const bad of ["", "/abs", "../up", "a/../b", "a/./b", "a//b", ".hidden", "a/.meta/x", "a\\b", "sp ace", "nul\0"]) {
        await assert.rejects(store.put(bad, new Uint8Array([1])), isCode("invalid_argument"), `put ${JSON.stringify(bad)}`);
        await assert.rejects(store.get(bad), isCode("invalid_argument"), `get ${JSON.stringify(bad)}`);
        await assert.rejects(store.head(bad), isCode("invalid_argument"), `head ${JSON.stringify(bad)}`);
        await assert.rejects(store.delete(bad), isCode("invalid_argument"), `delete ${JSON.stringify(bad)}`);
      }
      await assert.rejects(store.list("../"), isCode("invalid_argument"));
    });

    it("an aborted put stores nothing", async () => {
      const ac = new AbortController();
      let sent = 0;
      const body = new Readable({
        read() {
          sent++;
          if (sent === 3) ac.abort();
          this.push(sent > 1000 ? null : randomBytes(64 * 1024));
        },
      });
      await assert.rejects(store.put("abort/me", body, ac.signal), isCode("canceled"));
      assert.equal(await store.head("abort/me"), null);
    });
  });
}

describe("blob keys and openBlobStore", () => {
  it("checkBlobKey accepts ordinary keys", () => {
    for (const k of ["a", "snapshots/sb123/memory.img", "templates/x/build-1.rootfs.zst", "a=b,c:d@e+f"]) assert.equal(checkBlobKey(k), k);
  });
  it("openBlobStore picks the backend from SPACE_BLOB_URL", () => {
    const base = {
      SPACE_DATA_DIR: "/tmp/space-data",
      SPACE_S3_ENDPOINT: "http://127.0.0.1:9000",
      SPACE_S3_REGION: "us-east-1",
      SPACE_S3_ACCESS_KEY_ID: "k",
      SPACE_S3_SECRET_ACCESS_KEY: "s",
      SPACE_S3_FORCE_PATH_STYLE: true,
    };
    assert.equal(openBlobStore({ ...base, SPACE_BLOB_URL: "" }).kind, "fs");
    assert.equal(openBlobStore({ ...base, SPACE_BLOB_URL: "/var/lib/space/blobs" }).kind, "fs");
    assert.equal(openBlobStore({ ...base, SPACE_BLOB_URL: "file:///var/lib/space/blobs" }).kind, "fs");
    assert.equal(openBlobStore({ ...base, SPACE_BLOB_URL: "s3://my-bucket/some/prefix" }).kind, "s3");
    assert.throws(() => openBlobStore({ ...base, SPACE_BLOB_URL: "s3://B" }), /SPACE_BLOB_URL="s3:\/\/B" is invalid/);
    assert.throws(() => openBlobStore({ ...base, SPACE_BLOB_URL: "ftp://x" }), /SPACE_BLOB_URL/);
  });
});
