/**
 * A test double of AWS ECR's GetAuthorizationToken endpoint (AWS cannot be reached from
 * here): an HTTP server on 127.0.0.1 that checks the SigV4 signature of each request by
 * signing it again with the one secret it knows (@smithy/signature-v4, as AWS would), and
 * answers a good one with a registry token for `issue` (base64 `user:password`, as ECR's
 * `authorizationToken`), a bad one with ECR's 400 `InvalidSignatureException` /
 * `UnrecognizedClientException`. `seen` records each request's verdict.
 */
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { SignatureV4 } from "@smithy/signature-v4";
import { Sha256 } from "../../src/templates/ecr-auth.ts";

export interface FakeEcr {
  url: string;
  seen: Array<{ accessKeyId: string; region: string; ok: boolean }>;
  stop(): Promise<void>;
}

export async function startFakeEcr(keys: { accessKeyId: string; secretAccessKey: string }, issue: { username: string; password: string }): Promise<FakeEcr> {
  const seen: FakeEcr["seen"] = [];
  const answer = (res: import("node:http").ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { "content-type": "application/x-amz-json-1.1" });
    res.end(JSON.stringify(body));
  };
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      void (async () => {
        const auth = String(req.headers.authorization ?? "");
        const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/ecr\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]+)$/.exec(auth);
        if (!m || req.headers["x-amz-target"] !== "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken") {
          return answer(res, 400, { __type: "MissingAuthenticationTokenException", message: "Missing Authentication Token" });
        }
        const [, accessKeyId, , region, signedHeaders, signature] = m as unknown as [string, string, string, string, string, string];
        if (accessKeyId !== keys.accessKeyId) {
          seen.push({ accessKeyId, region, ok: false });
          return answer(res, 400, { __type: "UnrecognizedClientException", message: "The security token included in the request is invalid." });
        }
        const headers: Record<string, string> = {};
        for (const h of signedHeaders.split(";")) headers[h] = String(req.headers[h] ?? "");
        const url = new URL(req.url ?? "/", `http://${req.headers.host}`);
        const date = String(req.headers["x-amz-date"]);
        const signingDate = new Date(`${date.slice(0, 4)}-${date.slice(4, 6)}-${date.slice(6, 8)}T${date.slice(9, 11)}:${date.slice(11, 13)}:${date.slice(13, 15)}Z`);
        const signer = new SignatureV4({ credentials: keys, region, service: "ecr", sha256: Sha256 });
        const again = await signer.sign(
          { method: req.method ?? "POST", protocol: "http:", hostname: url.hostname, port: Number(url.port), path: url.pathname, query: {}, headers, body: Buffer.concat(chunks).toString("utf8") },
          { signingDate },
        );
        const ok = String(again.headers.authorization ?? "").endsWith(`Signature=${signature}`);
        seen.push({ accessKeyId, region, ok });
        if (!ok) return answer(res, 400, { __type: "InvalidSignatureException", message: "The request signature we calculated does not match the signature you provided." });
        answer(res, 200, {
          authorizationData: [{ authorizationToken: Buffer.from(`${issue.username}:${issue.password}`).toString("base64"), expiresAt: Date.now() / 1000 + 43200, proxyEndpoint: "https://fake.dkr.ecr" }],
        });
      })();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/`, seen, stop: () => new Promise((r) => server.close(() => r())) };
}
