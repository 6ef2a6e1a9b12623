/**
 * Templates from registry images end to end: the real stack (`space up`) and four local
 * registries (Debian's docker-registry, test/support/local-registry.ts: one open, one
 * behind basic auth, one over TLS), with the test's OCI image pushed there by skopeo. The unmodified
 * e2b SDK builds `fromImage("127.0.0.1:<port>/…:tag")` and boots it; the private image
 * needs and accepts credentials and refuses wrong ones with a 4xx naming the registry; a
 * second template on the same image pulls nothing, one on an image sharing its base pulls
 * only the new layer (the build log's `pulled N bytes`, the Native build's `pulled_bytes` and
 * `space_registry_pulled_bytes_total`); the digest is recorded; an
 * unreachable registry fails the build request; `oci://` names a layout (by tag or
 * digest) or an archive on the node; `fromAWSRegistry` keys become an ECR token (against
 * test/support/fake-ecr.ts, which checks the SigV4 signature) that reaches the private
 * registry as its credentials, `fromGCPRegistry`'s key reaches one as `_json_key`; a mirror serves a registry that does not
 * exist (SPACE_REGISTRY_MIRRORS); the operator's auth file admits a fourth, private one
 * (SPACE_REGISTRY_AUTH_FILE); `space template build` takes a
 * Dockerfile `FROM <registry image>`. The operator's CA (SPACE_EXTRA_CA_CERTS, a test CA
 * made here with openssl) is trusted by pulls from a TLS registry whose certificate it
 * signed, and (SPACE_EXTRA_CA_CERTS_IN_SANDBOXES) by `curl`/Python inside build
 * containers and sandboxes against an HTTPS server on localhost there. Needs root (runc,
 * netns, btrfs).
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox, Template, type ConnectionOpts } from "e2b";
import { exec } from "../../src/core/exec.ts";
import { freePort, startStack, type Stack } from "../support/stack.ts";
import { localRegistrySkipReason, startLocalRegistry, type LocalRegistry } from "../support/local-registry.ts";
import { makeOciArchive, type OciFixture } from "../templates/fixtures.ts";
import { startFakeEcr, type FakeEcr } from "../support/fake-ecr.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : localRegistrySkipReason();

/** Host objects of this suite's node (never another stack's or the node tests'). */
const HOST_SCOPE = {
  SPACE_NODE_BRIDGE: "spcreg0",
  SPACE_NODE_NFT_TABLE: "space_e2e_reg",
  SPACE_NODE_VETH_PREFIX: "vr",
  SPACE_NODE_CGROUP_PARENT: "space-e2e-reg",
  SPACE_NODE_SLOT_CIDR: "10.206.0.0/20",
  SPACE_NODE_BTRFS_IMAGE_GIB: "16",
  SPACE_NODE_DISK_RESERVE_MIB: "1024",
};

/** A test CA and a certificate it signed for localhost and 127.0.0.1 (server.pem, server.key) in `dir`. */
function makeTestCa(dir: string): void {
  const openssl = (args: string[]) => {
    const r = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
    assert.equal(r.status, 0, `openssl ${args.join(" ")}: ${r.stderr}`);
  };
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  openssl(["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=space registry test CA", "-days", "1"]);
  openssl(["req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]);
  spawnSync("sh", ["-c", "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > ext.cnf"], { cwd: dir });
  openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf"]);
}

/** An HTTPS server on localhost:8443 with the test CA's certificate (in /srv/tls), then `probe` against it. */
const httpsProbe = (probe: string) =>
  "python3 -c \"import http.server, ssl; s = http.server.HTTPServer(('127.0.0.1', 8443), http.server.SimpleHTTPRequestHandler); " +
  "c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain('/srv/tls/server.pem', '/srv/tls/server.key'); s.socket = c.wrap_socket(s.socket, server_side=True); s.serve_forever()\" >/dev/null 2>&1 & " +
  `for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/8443) 2>/dev/null && break; sleep 0.1; done; ${probe}`;

/** `pulled N bytes` of a build's logs (the source layer's line). */
function pulledBytes(logs: string[]): number {
  const m = logs.map((l) => /\(pulled (\d+) bytes\)/.exec(l)).find(Boolean);
  assert.ok(m, `no "pulled N bytes" line in:\n${logs.join("\n")}`);
  return Number(m[1]);
}

describe("templates from registry images with the e2b SDK", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let open: LocalRegistry;
  let priv: LocalRegistry;
  let tls: LocalRegistry;
  /** Behind basic auth too, its credentials only in the operator's auth file. */
  let operatorOnly: LocalRegistry;
  /** Behind basic auth as Google's registries take a service account key (`_json_key`). */
  let gcp: LocalRegistry;
  /** ECR's token endpoint (a test double: AWS is not reachable), issuing `priv`'s credentials. */
  let ecr: FakeEcr;
  const awsKeys = { accessKeyId: "AKIDSPACEE2E", secretAccessKey: `aws-${randomBytes(6).toString("hex")}`, region: "eu-west-1" };
  const serviceAccount = { type: "service_account", project_id: "space-e2e", k: randomBytes(4).toString("hex") };
  let tlsDir: string;
  let oci: OciFixture;
  let work: string;
  const sandboxes: Sandbox[] = [];
  const creds = { username: "alice", password: `pw-${randomBytes(6).toString("hex")}` };

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "space-reg-"));
    tlsDir = join(work, "tls");
    await mkdir(tlsDir);
    makeTestCa(tlsDir);
    open = await startLocalRegistry();
    priv = await startLocalRegistry({ auth: creds });
    tls = await startLocalRegistry({ tls: { cert: join(tlsDir, "server.pem"), key: join(tlsDir, "server.key") } });
    const operatorCreds = { username: "operator", password: `op-${randomBytes(6).toString("hex")}` };
    operatorOnly = await startLocalRegistry({ auth: operatorCreds });
    gcp = await startLocalRegistry({ auth: { username: "_json_key", password: JSON.stringify(serviceAccount) } });
    ecr = await startFakeEcr(awsKeys, creds);
    // containers-auth.json as `skopeo login` writes it.
    await writeFile(join(work, "auth.json"), JSON.stringify({ auths: { [operatorOnly.host]: { auth: Buffer.from(`${operatorCreds.username}:${operatorCreds.password}`).toString("base64") } } }), { mode: 0o600 });
    oci = await makeOciArchive();
    // Image `extra`: the fixture's layers plus one more (shares its base with `v1`).
    const layout = join(oci.dir, "layout");
    await mkdir(join(work, "extra"));
    await writeFile(join(work, "extra", "extra.txt"), "extra layer\n");
    await exec("umoci", ["insert", "--image", `${layout}:latest`, "--tag", "extra", join(work, "extra"), "/opt"], { timeoutMs: 60_000 });
    await open.push(`oci:${layout}:latest`, "fixture/app:v1");
    await open.push(`oci:${layout}:extra`, "fixture/app:extra");
    await priv.push(`oci:${layout}:latest`, "private/app:v1");
    await tls.push(`oci:${layout}:latest`, "tls/app:v1");
    await operatorOnly.push(`oci:${layout}:latest`, "team/app:v1");
    await gcp.push(`oci:${layout}:latest`, "gcp-project/app:v1");
    stack = await startStack({
      env: {
        ...HOST_SCOPE,
        SPACE_NODE_RUNTIME_STATE_DIR: `/run/space-e2e-reg-${randomBytes(3).toString("hex")}`,
        SPACE_REGISTRY_INSECURE: `${open.host},${priv.host},${operatorOnly.host},${gcp.host}`,
        SPACE_REGISTRY_ECR_ENDPOINT: ecr.url,
        SPACE_REGISTRY_AUTH_FILE: join(work, "auth.json"),
        SPACE_REGISTRY_INSPECT_TIMEOUT_S: "10",
        // A registry that does not exist, served by its mirror (the open instance).
        SPACE_REGISTRY_MIRRORS: `registry.space.invalid=${open.host}`,
        // The TLS registry is not insecure: only the operator's CA makes its certificate trusted.
        SPACE_EXTRA_CA_CERTS: join(tlsDir, "ca.pem"),
        SPACE_EXTRA_CA_CERTS_IN_SANDBOXES: "true",
      },
    });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
  });
  after(async () => {
    await Promise.allSettled(sandboxes.map((s) => s.kill()));
    await stack?.stop();
    await open?.stop();
    await priv?.stop();
    await tls?.stop();
    await operatorOnly?.stop();
    await gcp?.stop();
    await ecr?.stop();
    await oci?.cleanup();
    if (work) await rm(work, { recursive: true, force: true });
  });

  /** The Native build object of a finished build. */
  async function nativeBuild(info: { templateId: string; buildId: string }): Promise<{ image_digest?: string | null; pulled_bytes?: number | null }> {
    const r = await fetch(`${stack.apiUrl}/v1/templates/${info.templateId}/builds/${info.buildId}`, { headers: { authorization: `Bearer ${stack.apiKey}` } });
    assert.equal(r.status, 200, await r.clone().text());
    return (await r.json()) as { image_digest?: string | null; pulled_bytes?: number | null };
  }

  /** space_registry_pulled_bytes_total on the stack's /metrics (the control plane counts each finished build's pull). */
  async function pulledBytesMetric(): Promise<number> {
    const text = await (await fetch(`${stack.apiUrl}/metrics`)).text();
    const line = text.split("\n").find((l) => l.startsWith("space_registry_pulled_bytes_total"));
    assert.ok(line, `no space_registry_pulled_bytes_total in /metrics:\n${text.slice(0, 2000)}`);
    return Number(line.split(" ").at(-1));
  }

  /** The digest the registry serves for `ref` (sha256 of the manifest bytes). */
  async function registryDigest(ref: string): Promise<string> {
    const r = await exec("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${ref}`], { timeoutMs: 30_000 });
    return `sha256:${createHash("sha256").update(r.stdout).digest("hex")}`;
  }

  test("fromImage('127.0.0.1:<port>/fixture/app:v1') builds, boots and records the pinned digest", async () => {
    const logs: string[] = [];
    const image = `${open.host}/fixture/app:v1`;
    const info = await Template.build(Template().fromImage(image).runCmd("cat /etc/layer2 > /etc/from-registry", { user: "root" }), "reg-open", {
      ...opts,
      onBuildLogs: (e) => logs.push(e.message),
    });
    const digest = await registryDigest(image);
    assert.ok(logs.some((l) => l.includes(`pinned to ${digest}`)), logs.join("\n"));
    assert.ok(pulledBytes(logs) > 1024 * 1024, "the first pull fetches the image's layers");

    const sb = await Sandbox.create("reg-open", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /etc/from-registry; echo $FIXTURE")).stdout, "from layer 2\noci\n");
    await sb.kill();

    // The Native build object carries the digest the pull was pinned to and the bytes it fetched.
    const native = await nativeBuild(info);
    assert.equal(native.image_digest, digest);
    assert.equal(native.pulled_bytes, pulledBytes(logs));
  });

  test("a second template on the same image pulls nothing; one on an image sharing its base pulls only the new layer (build record and space_registry_pulled_bytes_total)", async () => {
    const before = await pulledBytesMetric();
    assert.ok(before > 1024 * 1024, `the first template's pull is counted (${before} bytes)`);
    const same: string[] = [];
    const second = await Template.build(Template().fromImage(`${open.host}/fixture/app:v1`).runCmd("echo second > /etc/second", { user: "root" }), "reg-same", {
      ...opts,
      onBuildLogs: (e) => same.push(e.message),
    });
    assert.equal(pulledBytes(same), 0, same.join("\n"));
    assert.equal((await nativeBuild(second)).pulled_bytes, 0);
    assert.equal(await pulledBytesMetric(), before, "a template on an image the node holds fetches no byte");

    const shared: string[] = [];
    const extra = await Template.build(Template().fromImage(`${open.host}/fixture/app:extra`), "reg-extra", { ...opts, onBuildLogs: (e) => shared.push(e.message) });
    const bytes = pulledBytes(shared);
    assert.ok(bytes > 0 && bytes < 64 * 1024, `only the extra layer, config and manifest are fetched (pulled ${bytes} bytes):\n${shared.join("\n")}`);
    assert.equal((await nativeBuild(extra)).pulled_bytes, bytes);
    assert.equal(await pulledBytesMetric(), before + bytes);
    const sb = await Sandbox.create("reg-extra", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /opt/extra.txt /etc/layer2")).stdout, "extra layer\nfrom layer 2\n");
    await sb.kill();
  });

  test("oci:// references: a layout by tag and by digest, an archive; a missing path, a wrong digest and a relative path refused naming them", async () => {
    const layout = join(oci.dir, "layout");
    const index = JSON.parse(await readFile(join(layout, "index.json"), "utf8")) as { manifests: Array<{ digest: string; annotations?: Record<string, string> }> };
    const latest = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === "latest")!.digest;

    await Template.build(Template().fromImage(`oci://${layout}:extra`), "oci-tag", opts);
    await Template.build(Template().fromImage(`oci://${layout}@${latest}`), "oci-digest", opts);
    await Template.build(Template().fromImage(`oci://${oci.archive}`), "oci-archive", opts);
    for (const [name, cmd, want] of [
      ["oci-tag", "cat /opt/extra.txt /etc/layer2", "extra layer\nfrom layer 2\n"],
      ["oci-digest", "cat /etc/layer2; test -e /opt/extra.txt || echo no-extra", "from layer 2\nno-extra\n"],
      ["oci-archive", "cat /etc/layer2; echo $FIXTURE", "from layer 2\noci\n"],
    ] as const) {
      const sb = await Sandbox.create(name, opts);
      sandboxes.push(sb);
      assert.equal((await sb.commands.run(cmd)).stdout, want, name);
      await sb.kill();
    }

    const missing = join(work, "no-such-layout");
    await assert.rejects(Template.build(Template().fromImage(`oci://${missing}:v1`), "oci-missing", opts), (e: Error) => e.message.includes(`no OCI layout or archive at ${missing}`));
    const wrong = `sha256:${"0".repeat(64)}`;
    await assert.rejects(Template.build(Template().fromImage(`oci://${layout}@${wrong}`), "oci-wrong", opts), (e: Error) => e.message.includes(`has no manifest ${wrong}`));
    await assert.rejects(Template.build(Template().fromImage("oci://relative/dir"), "oci-relative", opts), (e: Error & { status?: number }) => {
      assert.match(e.message, /fromImage "oci:\/\/relative\/dir" is not an oci:\/\/ reference/);
      return true;
    });
  });

  test("a digest reference builds; an unknown digest is refused on the build request", async () => {
    const digest = await registryDigest(`${open.host}/fixture/app:v1`);
    const logs: string[] = [];
    await Template.build(Template().fromImage(`${open.host}/fixture/app@${digest}`), "reg-digest", { ...opts, onBuildLogs: (e) => logs.push(e.message) });
    assert.ok(logs.some((l) => l.includes(`pinned to ${digest}`)), logs.join("\n"));
    const unknown = `sha256:${"0".repeat(64)}`;
    await assert.rejects(Template.build(Template().fromImage(`${open.host}/fixture/app@${unknown}`), "reg-digest", opts), (e: Error) => {
      assert.match(e.message, /^4\d\d: image .*fixture\/app@sha256:0+ not found in registry/);
      return true;
    });
  });

  test("a mirror (SPACE_REGISTRY_MIRRORS) serves a registry's images", async () => {
    const logs: string[] = [];
    await Template.build(Template().fromImage("registry.space.invalid/fixture/app:v1"), "reg-mirror", { ...opts, onBuildLogs: (e) => logs.push(e.message) });
    const digest = await registryDigest(`${open.host}/fixture/app:v1`);
    assert.ok(logs.some((l) => l.includes(`pinned to ${digest}`)), logs.join("\n"));
  });

  test("a private image: refused without credentials and with wrong ones (4xx naming the registry), built with the right ones", async () => {
    const image = `${priv.host}/private/app:v1`;
    const hostRe = new RegExp(`^4\\d\\d: .*registry ${priv.host.replace(/\./g, "\\.")}`);
    await assert.rejects(Template.build(Template().fromImage(image), "reg-private", opts), (e: Error) => {
      assert.match(e.message, hostRe);
      assert.match(e.message, /without credentials/);
      return true;
    });
    const wrong = { username: creds.username, password: "not-the-password" };
    await assert.rejects(Template.build(Template().fromImage(image, wrong), "reg-private", opts), (e: Error) => {
      assert.match(e.message, hostRe);
      assert.match(e.message, /refused the credentials/);
      assert.doesNotMatch(e.message, /not-the-password/);
      return true;
    });
    const info = await Template.build(Template().fromImage(image, creds).runCmd("echo private > /etc/private", { user: "root" }), "reg-private", opts);
    const sb = await Sandbox.create("reg-private", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /etc/private")).stdout, "private\n");
    await sb.kill();
    // Nothing the build stored or logged holds the password.
    const logs = await Template.getBuildStatus({ templateId: info.templateId, buildId: info.buildId }, opts);
    assert.doesNotMatch(JSON.stringify(logs), new RegExp(creds.password));
  });

  test("fromAWSRegistry: the keys the SDK sends become an ECR token (SigV4) that reaches the registry as its basic auth; wrong keys are a 403 naming the region", async () => {
    const image = `${priv.host}/private/app:v1`;
    await assert.rejects(Template.build(Template().fromAWSRegistry(image, { ...awsKeys, secretAccessKey: "not-the-secret" }), "reg-aws", opts), (e: Error) => {
      assert.match(e.message, /^403: .*AWS ECR in eu-west-1 refused the keys given for .*InvalidSignatureException/);
      assert.doesNotMatch(e.message, /not-the-secret/);
      return true;
    });
    await Template.build(Template().fromAWSRegistry(image, awsKeys).runCmd("echo aws > /etc/aws", { user: "root" }), "reg-aws", opts);
    assert.deepEqual(ecr.seen.map((s) => [s.accessKeyId, s.region, s.ok]), [
      [awsKeys.accessKeyId, "eu-west-1", false],
      [awsKeys.accessKeyId, "eu-west-1", true],
    ]);
    const sb = await Sandbox.create("reg-aws", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /etc/aws /etc/layer2")).stdout, "aws\nfrom layer 2\n");
    await sb.kill();
  });

  test("fromGCPRegistry: the service account key the SDK sends reaches the registry as `_json_key` basic auth; a wrong key is a 4xx naming the registry", async () => {
    const image = `${gcp.host}/gcp-project/app:v1`;
    await assert.rejects(Template.build(Template().fromGCPRegistry(image, { serviceAccountJSON: { ...serviceAccount, k: "wrong" } }), "reg-gcp", opts), (e: Error) => {
      assert.match(e.message, new RegExp(`^4\\d\\d: .*registry ${gcp.host.replace(/\./g, "\\.")} refused the credentials`));
      return true;
    });
    await Template.build(Template().fromGCPRegistry(image, { serviceAccountJSON: serviceAccount }), "reg-gcp", opts);
    const sb = await Sandbox.create("reg-gcp", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /etc/layer2")).stdout, "from layer 2\n");
    await sb.kill();
  });

  test("the operator's auth file (SPACE_REGISTRY_AUTH_FILE) admits builds that bring no credentials", async () => {
    const info = await Template.build(Template().fromImage(`${operatorOnly.host}/team/app:v1`), "reg-operator", opts);
    assert.ok(info.buildId);
  });

  test("an unknown image and an unreachable registry fail the build request, naming the image or the host", async () => {
    await assert.rejects(Template.build(Template().fromImage(`${open.host}/fixture/nope:v1`), "reg-missing", opts), (e: Error) => {
      assert.match(e.message, /^4\d\d: image .*fixture\/nope:v1 not found in registry/);
      return true;
    });
    const closed = `127.0.0.1:${await freePort()}`;
    const t0 = Date.now();
    await assert.rejects(Template.build(Template().fromImage(`${closed}/x/y:z`), "reg-unreachable", opts), (e: Error) => {
      assert.match(e.message, new RegExp(`^4\\d\\d: registry ${closed.replace(/\./g, "\\.")} is unreachable`));
      return true;
    });
    process.stderr.write(`unreachable registry refused in ${Date.now() - t0} ms\n`);
    await assert.rejects(Template.build(Template().fromImage("Not A Ref!"), "reg-bad", opts), (e: Error) => {
      assert.match(e.message, /^400: fromImage "Not A Ref!" is not an image reference/);
      return true;
    });
  });

  test("space template build: a Dockerfile FROM a registry image", async () => {
    const ctx = join(work, "ctx");
    await mkdir(ctx);
    await writeFile(join(ctx, "Dockerfile"), `FROM ${open.host}/fixture/app:v1\nRUN echo from-dockerfile > /etc/cli\n`);
    const r = spawnSync(process.execPath, ["bin/space.mjs", "template", "build", ctx, "--name", "reg-cli"], {
      env: { ...process.env, E2B_API_URL: stack.apiUrl, E2B_API_KEY: stack.apiKey },
      encoding: "utf8",
      timeout: 300_000,
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /pinned to sha256:/);
    const sb = await Sandbox.create("reg-cli", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /etc/cli")).stdout, "from-dockerfile\n");
    await sb.kill();
  });

  test("the operator's CA: trusted by pulls from a TLS registry it signed (not listed as insecure)", async () => {
    const logs: string[] = [];
    await Template.build(Template().fromImage(`${tls.host}/tls/app:v1`), "reg-tls", { ...opts, onBuildLogs: (e) => logs.push(e.message) });
    assert.ok(logs.some((l) => /pinned to sha256:/.test(l)), logs.join("\n"));
  });

  test("the operator's CA inside build containers and sandboxes: curl and Python trust an HTTPS server its certificate", async () => {
    const ctx = join(work, "ca-ctx");
    await mkdir(join(ctx, "tls"), { recursive: true });
    for (const f of ["server.pem", "server.key"]) await writeFile(join(ctx, "tls", f), await readFile(join(tlsDir, f)));
    const logs: string[] = [];
    const t = Template({ fileContextPath: ctx })
      .fromTemplate("base")
      .copy("tls", "/srv/tls")
      .runCmd(httpsProbe("curl -sS -o /dev/null -w 'build-curl %{http_code}\\n' https://localhost:8443/"), { user: "root" });
    await Template.build(t, "ca-tpl", { ...opts, onBuildLogs: (e) => logs.push(e.message) });
    assert.ok(logs.some((l) => /build-curl 200/.test(l)), `curl in the build container trusts the CA:\n${logs.join("\n")}`);

    const sb = await Sandbox.create("ca-tpl", opts);
    sandboxes.push(sb);
    const r = await sb.commands.run(
      httpsProbe("curl -sS -o /dev/null -w '%{http_code}\\n' https://localhost:8443/ && python3 -c \"import urllib.request; print(urllib.request.urlopen('https://localhost:8443/').status)\""),
      { user: "root", timeoutMs: 60_000 },
    );
    assert.equal(r.stdout, "200\n200\n", r.stderr);
    const env = await sb.commands.run("echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $PIP_CERT $NODE_EXTRA_CA_CERTS");
    assert.equal(env.stdout, `${Array(4).fill("/etc/ssl/certs/ca-certificates.crt").join(" ")}\n`);
    // Appended, not replaced: the image's own CAs are still there.
    const count = await sb.commands.run("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt");
    assert.ok(Number(count.stdout) > 10, count.stdout);
    await sb.kill();
  });
});
