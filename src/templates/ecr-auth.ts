/**
 * E2B's `fromAWSRegistry(image, { accessKeyId, secretAccessKey, region })`: the control plane
 * exchanges the keys for an ECR registry password as the AWS CLI's `aws ecr
 * get-login-password` does (ECR's GetAuthorizationToken, signed with SigV4 by
 * @smithy/signature-v4, the AWS SDK's own signer) and hands the node plain registry
 * credentials (`AWS:<token>`): nodes never see the keys. The endpoint is ECR's for the
 * region, or the operator's (SPACE_REGISTRY_ECR_ENDPOINT: a VPC or FIPS endpoint).
 * A refusal or an unreachable endpoint answers the build request with a 4xx naming the
 * region and AWS's own words; the keys never reach logs or errors.
 */
import { createHash, createHmac, type Hash as NodeHash, type Hmac } from "node:crypto";
import { SignatureV4 } from "@smithy/signature-v4";
import { invalid, SpaceError } from "../core/errors.ts";
import type { RegistryAuth } from "../contract/build-recipe.ts";

export interface AwsRegistryKeys {
  awsAccessKeyId: string;
  awsSecretAccessKey: string;
  awsRegion: string;
}

const REGION = /^[a-z]{2}(?:-[a-z]+)+-\d{1,2}$/;
const TARGET = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken";

/** SHA-256 (HMAC when given a secret) over node:crypto, in the shape the signer takes. */
export class Sha256 {
  readonly #h: NodeHash | Hmac;
  constructor(secret?: string | ArrayBuffer | ArrayBufferView) {
    this.#h = secret === undefined ? createHash("sha256") : createHmac("sha256", bytes(secret));
  }
  update(data: string | ArrayBuffer | ArrayBufferView): void {
    this.#h.update(bytes(data));
  }
  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.#h.digest()));
  }
}

function bytes(d: string | ArrayBuffer | ArrayBufferView): string | Uint8Array {
  if (typeof d === "string") return d;
  return ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : new Uint8Array(d);
}

/** ECR's API endpoint for `region` (the operator's, when set). */
export function ecrEndpoint(region: string, override: string): URL {
  return new URL(override || `https://api.ecr.${region}.amazonaws.com/`);
}

/** The registry credentials ECR issues for these keys (`AWS:<12 h token>`); 4xx naming `fromImageRegistry` when refused. */
export async function ecrRegistryAuth(keys: AwsRegistryKeys, image: string, endpointOverride: string, signal: AbortSignal): Promise<RegistryAuth> {
  if (!REGION.test(keys.awsRegion)) throw invalid(`fromImageRegistry.awsRegion ${JSON.stringify(keys.awsRegion)} is not an AWS region (e.g. us-east-1)`, { field: "fromImageRegistry" });
  const url = ecrEndpoint(keys.awsRegion, endpointOverride);
  const body = "{}";
  const signer = new SignatureV4({
    credentials: { accessKeyId: keys.awsAccessKeyId, secretAccessKey: keys.awsSecretAccessKey },
    region: keys.awsRegion,
    service: "ecr",
    sha256: Sha256,
  });
  const signed = await signer.sign({
    method: "POST",
    protocol: url.protocol,
    hostname: url.hostname,
    ...(url.port ? { port: Number(url.port) } : {}),
    path: url.pathname,
    query: {},
    headers: { host: url.host, "content-type": "application/x-amz-json-1.1", "x-amz-target": TARGET },
    body,
  });
  let res: Response;
  try {
    res = await fetch(url, { method: "POST", headers: signed.headers, body, signal: AbortSignal.any([signal, AbortSignal.timeout(15_000)]) });
  } catch (e: unknown) {
    const why = e instanceof Error ? ((e.cause as { code?: string } | undefined)?.code ?? e.name) : "error";
    throw invalid(`AWS ECR in ${keys.awsRegion} (${url.host}) is unreachable for ${image}: ${why}`, { field: "fromImageRegistry" });
  }
  const text = await res.text();
  let answer: { __type?: string; message?: string; Message?: string; authorizationData?: Array<{ authorizationToken?: string }> } = {};
  try {
    answer = JSON.parse(text) as typeof answer;
  } catch {
    /* not JSON: named by status below */
  }
  if (!res.ok) {
    const kind = (answer.__type ?? "").split("#").at(-1) || `HTTP ${res.status}`;
    const msg = (answer.message ?? answer.Message ?? "").slice(0, 200);
    const words = `${kind}${msg ? `: ${msg}` : ""}`.split(keys.awsSecretAccessKey).join("***");
    if (res.status === 400 || res.status === 401 || res.status === 403) {
      throw new SpaceError("permission_denied", `AWS ECR in ${keys.awsRegion} refused the keys given for ${image}: ${words}`, { details: { field: "fromImageRegistry" } });
    }
    throw invalid(`AWS ECR in ${keys.awsRegion} did not issue a registry token for ${image}: ${words}`, { field: "fromImageRegistry" });
  }
  const token = answer.authorizationData?.[0]?.authorizationToken;
  const decoded = token ? Buffer.from(token, "base64").toString("utf8") : "";
  const colon = decoded.indexOf(":");
  if (colon <= 0 || colon === decoded.length - 1) throw invalid(`AWS ECR in ${keys.awsRegion} answered without a registry token for ${image}`, { field: "fromImageRegistry" });
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}
