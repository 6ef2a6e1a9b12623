/** Registry pulls' logic (references, operator settings, auth files, error classification, E2B's registry config) and the operator's CA in a rootfs. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatRegistryRef, parseRegistryRef } from "../../src/contract/build-recipe.ts";
import { parseInsecure, parseMirrors } from "../../src/core/registry-lists.ts";
import { loadConfig } from "../../src/core/config.ts";
import { authFileFor, registriesConf } from "../../src/node/templates/registry-config.ts";
import { classifyRegistryError, registryAnswer } from "../../src/node/templates/registry-source.ts";
import { registryAuth } from "../../src/templates/build-coordinator.ts";
import { parseDockerfile } from "../../src/cli/template.ts";
import { SpaceError } from "../../src/core/errors.ts";
import { startFakeEcr } from "../support/fake-ecr.ts";
import { loadRootfsTrust } from "../../src/node/templates/ca-trust.ts";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const D = `sha256:${"a".repeat(64)}`;

describe("registry references", () => {
  it("parses what the SDKs send, with Docker's defaults", () => {
    assert.deepEqual(parseRegistryRef("python:3.12"), { registry: "docker.io", repository: "library/python", tag: "3.12" });
    assert.deepEqual(parseRegistryRef("ubuntu"), { registry: "docker.io", repository: "library/ubuntu", tag: "latest" });
    assert.deepEqual(parseRegistryRef("oven/bun:1"), { registry: "docker.io", repository: "oven/bun", tag: "1" });
    assert.deepEqual(parseRegistryRef("localhost:5000/x:y"), { registry: "localhost:5000", repository: "x", tag: "y" });
    assert.deepEqual(parseRegistryRef("docker://127.0.0.1:5000/team/app"), { registry: "127.0.0.1:5000", repository: "team/app", tag: "latest" });
    assert.deepEqual(parseRegistryRef(`ghcr.io/a/b@${D}`), { registry: "ghcr.io", repository: "a/b", digest: D });
    assert.deepEqual(parseRegistryRef(`ghcr.io/a/b:v1@${D}`), { registry: "ghcr.io", repository: "a/b", tag: "v1", digest: D });
    assert.equal(formatRegistryRef(parseRegistryRef("python:3.12")!), "docker://docker.io/library/python:3.12");
  });
  it("refuses what is not a reference", () => {
    for (const bad of ["Not A Ref!", "UPPER/case", "a/b:", "x@sha256:short", "a//b", "", "host:99999999/x"]) assert.equal(parseRegistryRef(bad), undefined, bad);
  });
});

describe("operator registry settings", () => {
  it("parses insecure registries and mirrors, naming a bad entry", () => {
    assert.deepEqual(parseInsecure(" 127.0.0.1:5000, registry.lan "), ["127.0.0.1:5000", "registry.lan"]);
    assert.deepEqual(parseMirrors("docker.io=mirror.lan:5000|m2.lan/hub,quay.io=q.lan"), { "docker.io": ["mirror.lan:5000", "m2.lan/hub"], "quay.io": ["q.lan"] });
    assert.throws(() => parseInsecure("a b"), /"a b"/);
    assert.throws(() => parseMirrors("docker.io"), /"docker.io"/);
    assert.throws(() => loadConfig({ SPACE_REGISTRY_MIRRORS: "=x" }), /SPACE_REGISTRY_MIRRORS/);
    assert.deepEqual(loadConfig({ SPACE_REGISTRY_INSECURE: "127.0.0.1:5000" }).SPACE_REGISTRY_INSECURE, ["127.0.0.1:5000"]);
  });
  it("writes a registries.conf with insecure registries and mirrors", () => {
    const conf = registriesConf({ insecure: ["127.0.0.1:5000", "mirror.lan:5000"], mirrors: { "docker.io": ["mirror.lan:5000"] } });
    assert.match(conf, /unqualified-search-registries = \[\]/);
    assert.match(conf, /\[\[registry\]\]\nprefix = "127.0.0.1:5000"\nlocation = "127.0.0.1:5000"\ninsecure = true/);
    assert.match(conf, /prefix = "docker.io"\nlocation = "docker.io"\ninsecure = false\n\n\[\[registry.mirror\]\]\nlocation = "mirror.lan:5000"\ninsecure = true/);
  });
  it("an auth file keeps the operator's entries and puts the build's credentials first for its registry", () => {
    const operator = JSON.stringify({ auths: { "a.io": { auth: "b3A6b3A=" }, "r.io": { auth: "b2xkOm9sZA==" } } });
    const out = JSON.parse(authFileFor(operator, "r.io", { username: "u", password: "p" })) as { auths: Record<string, { auth: string }> };
    assert.equal(out.auths["a.io"]!.auth, "b3A6b3A=");
    assert.equal(Buffer.from(out.auths["r.io"]!.auth, "base64").toString(), "u:p");
    assert.deepEqual(JSON.parse(authFileFor(undefined, "r.io", undefined)), { auths: {} });
    assert.throws(() => authFileFor("[1]", "r.io", undefined));
  });
});

describe("registry errors", () => {
  const ref = parseRegistryRef("127.0.0.1:5000/x:y")!;
  const img = "docker://127.0.0.1:5000/x:y";
  const fatal = (msg: string) => `time="2026-01-01T00:00:00Z" level=fatal msg="Error parsing image name \\"${img}\\": ${msg}"`;
  it("unauthorized → permission_denied naming the registry, with and without credentials", () => {
    const e = classifyRegistryError(fatal("reading manifest y in 127.0.0.1:5000/x: unauthorized: authentication required"), ref, img, false);
    assert.equal(e.code, "permission_denied");
    assert.match(e.message, /^registry 127\.0\.0\.1:5000 refused .* without credentials: unauthorized: authentication required/);
    assert.match(classifyRegistryError(fatal("reading manifest y in 127.0.0.1:5000/x: unauthorized: authentication required"), ref, img, true).message, /refused the credentials/);
  });
  it("not found, unreachable, plain HTTP and untrusted certificates → invalid_argument naming the image or host", () => {
    const nf = classifyRegistryError(fatal("reading manifest y in 127.0.0.1:5000/x: manifest unknown: manifest unknown"), ref, img, false);
    assert.equal(nf.code, "invalid_argument");
    assert.match(nf.message, /^image docker:\/\/127\.0\.0\.1:5000\/x:y not found in registry 127\.0\.0\.1:5000: manifest unknown/);
    const down = classifyRegistryError(fatal('pinging container registry 127.0.0.1:5000: Get \\"https://127.0.0.1:5000/v2/\\": dial tcp 127.0.0.1:5000: connect: connection refused'), ref, img, false);
    assert.match(down.message, /^registry 127\.0\.0\.1:5000 is unreachable .*connection refused/);
    assert.match(classifyRegistryError(fatal("pinging container registry 127.0.0.1:5000: http: server gave HTTP response to HTTPS client"), ref, img, false).message, /SPACE_REGISTRY_INSECURE=127\.0\.0\.1:5000/);
    assert.match(classifyRegistryError(fatal("x509: certificate signed by unknown authority"), ref, img, false).message, /SPACE_EXTRA_CA_CERTS/);
    assert.match(classifyRegistryError("i/o timeout", ref, img, false).message, /unreachable/);
  });
  it("never repeats a secret or URL credentials", () => {
    assert.equal(registryAnswer('level=fatal msg="bad https://bob:hunter22@r.io/v2/ hunter22"', ["hunter22"]), "bad https://r.io/v2/ ***");
  });
});

describe("E2B's fromImageRegistry", () => {
  const IMG = "127.0.0.1:5000/team/app:v1";
  const keys = { accessKeyId: "AKIDSPACETEST", secretAccessKey: "secret/of+the+test" };

  it("registry and gcp become credentials; malformed bodies are 400s naming the field", async () => {
    assert.equal(await registryAuth(undefined, IMG, ""), undefined);
    assert.deepEqual(await registryAuth({ type: "registry", username: "u", password: "p" }, IMG, ""), { username: "u", password: "p" });
    assert.deepEqual(await registryAuth({ type: "gcp", serviceAccountJson: '{"k":1}' }, IMG, ""), { username: "_json_key", password: '{"k":1}' });
    for (const bad of [
      { type: "aws", awsAccessKeyId: "", awsSecretAccessKey: "b", awsRegion: "us-east-1" },
      { type: "aws", awsAccessKeyId: "a", awsSecretAccessKey: "b", awsRegion: "not a region" },
      { type: "registry", username: "u" },
      { type: "other" },
    ]) {
      await assert.rejects(
        registryAuth(bad, IMG, ""),
        (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && /fromImageRegistry/.test(e.message),
        JSON.stringify(bad),
      );
    }
  });

  it("aws: the keys are exchanged for an ECR token with a SigV4-signed GetAuthorizationToken; refused keys are 403 naming the region, never the secret", async () => {
    const ecr = await startFakeEcr(keys, { username: "AWS", password: "ecr-token-1" });
    try {
      const aws = (secret: string, id = keys.accessKeyId) => ({ type: "aws", awsAccessKeyId: id, awsSecretAccessKey: secret, awsRegion: "eu-west-1" });
      assert.deepEqual(await registryAuth(aws(keys.secretAccessKey), IMG, ecr.url), { username: "AWS", password: "ecr-token-1" });
      assert.deepEqual(ecr.seen, [{ accessKeyId: keys.accessKeyId, region: "eu-west-1", ok: true }]);
      for (const [secret, id, why] of [["wrong-secret", keys.accessKeyId, "InvalidSignatureException"], [keys.secretAccessKey, "AKIDUNKNOWN", "UnrecognizedClientException"]] as const) {
        await assert.rejects(registryAuth(aws(secret, id), IMG, ecr.url), (e: unknown) => {
          assert.ok(e instanceof SpaceError && e.code === "permission_denied", String(e));
          assert.match(e.message, new RegExp(`AWS ECR in eu-west-1 refused the keys given for ${IMG}: ${why}`));
          assert.ok(!e.message.includes(secret), e.message);
          return true;
        });
      }
    } finally {
      await ecr.stop();
    }
    await assert.rejects(
      registryAuth({ type: "aws", awsAccessKeyId: "a", awsSecretAccessKey: "b", awsRegion: "us-east-1" }, IMG, "http://127.0.0.1:9/"),
      (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && /AWS ECR in us-east-1 \(127\.0\.0\.1:9\) is unreachable/.test(e.message),
    );
  });
  it("a Dockerfile FROM a registry image becomes fromImage; a template name stays fromTemplate", () => {
    assert.deepEqual(parseDockerfile("FROM 127.0.0.1:5000/team/app:v1\n", "/ctx").from, { fromImage: "127.0.0.1:5000/team/app:v1" });
    assert.deepEqual(parseDockerfile("FROM docker://python:3.12\n", "/ctx").from, { fromImage: "docker://python:3.12" });
    assert.deepEqual(parseDockerfile("FROM my-template:v2\n", "/ctx").from, { fromTemplate: "my-template:v2" });
  });
});

describe("the operator's CA in a rootfs", () => {
  const cert = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----";
  it("appends once to the image's bundle (through its symlinks), creates one where there is none, refuses a file without certificates", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "space-ca-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, "ca.pem"), `junk\n${cert}\n`);
    const trust = await loadRootfsTrust(join(dir, "ca.pem"));
    assert.equal(trust.env.SSL_CERT_FILE, "/etc/ssl/certs/ca-certificates.crt");
    const root = join(dir, "root");
    await mkdir(join(root, "etc/ssl/certs"), { recursive: true });
    await mkdir(join(root, "usr/share"), { recursive: true });
    await writeFile(join(root, "usr/share/bundle.crt"), "IMAGE CAS\n");
    await symlink("/usr/share/bundle.crt", join(root, "etc/ssl/certs/ca-certificates.crt"));
    await trust.apply(root);
    await trust.apply(root);
    const text = await readFile(join(root, "usr/share/bundle.crt"), "utf8");
    assert.ok(text.startsWith("IMAGE CAS\n"));
    assert.equal(text.split(cert).length, 2, "appended exactly once");
    const bare = join(dir, "bare");
    await mkdir(bare);
    await trust.apply(bare);
    assert.match(await readFile(join(bare, "etc/ssl/certs/ca-certificates.crt"), "utf8"), /BEGIN CERTIFICATE/);
    await writeFile(join(dir, "empty.pem"), "nothing\n");
    await assert.rejects(loadRootfsTrust(join(dir, "empty.pem")), /SPACE_EXTRA_CA_CERTS .* holds no PEM certificate/);
    await assert.rejects(loadRootfsTrust(join(dir, "missing.pem")), /SPACE_EXTRA_CA_CERTS .* cannot be read \(ENOENT\)/);
  });
});
