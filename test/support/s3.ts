/**
 * A real S3-compatible server for tests: s3rver on 127.0.0.1, a random port and a temp
 * directory, with buckets created up front. `stop()` closes it and removes the directory.
 *
 *   const s3 = await startS3Server({ buckets: ["space-test"] });
 *   const store = new S3BlobStore({ ...s3.clientOptions, bucket: "space-test", prefix: "t1" });
 *   ...; await s3.stop();
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
// s3rver ships no types.
// @ts-expect-error untyped CommonJS module
import S3rver from "s3rver";

export interface TestS3Server {
  /** e.g. http://127.0.0.1:41234 */
  endpoint: string;
  /** Options for S3BlobStore / S3Client (endpoint, region, credentials, path style). */
  clientOptions: { endpoint: string; region: string; accessKeyId: string; secretAccessKey: string; forcePathStyle: true };
  /** SPACE_* variables pointing at this server (add SPACE_BLOB_URL=s3://bucket/prefix). */
  env: Record<string, string>;
  stop(): Promise<void>;
}

interface S3rverInstance {
  run(): Promise<AddressInfo>;
  close(): Promise<void>;
}

/** `address`: where it listens (default 127.0.0.1; pods reach a host address instead). */
export async function startS3Server(opts: { buckets?: string[]; address?: string } = {}): Promise<TestS3Server> {
  const directory = await mkdtemp(join(tmpdir(), "space-s3rver-"));
  const server = new (S3rver as new (o: unknown) => S3rverInstance)({
    address: opts.address ?? "127.0.0.1",
    port: 0,
    silent: true,
    directory,
    configureBuckets: (opts.buckets ?? ["space-test"]).map((name) => ({ name, configs: [] })),
  });
  const addr = await server.run();
  const endpoint = `http://${opts.address ?? "127.0.0.1"}:${addr.port}`;
  // s3rver accepts this fixed pair (its defaults).
  const accessKeyId = "S3RVER";
  const secretAccessKey = "S3RVER";
  let stopped = false;
  return {
    endpoint,
    clientOptions: { endpoint, region: "us-east-1", accessKeyId, secretAccessKey, forcePathStyle: true },
    env: {
      SPACE_S3_ENDPOINT: endpoint,
      SPACE_S3_REGION: "us-east-1",
      SPACE_S3_ACCESS_KEY_ID: accessKeyId,
      SPACE_S3_SECRET_ACCESS_KEY: secretAccessKey,
      SPACE_S3_FORCE_PATH_STYLE: "true",
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.close();
      await rm(directory, { recursive: true, force: true });
    },
  };
}
