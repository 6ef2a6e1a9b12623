/**
 * Templates end to end (template_build_from_oci_boots): the real stack (`space up`), the
 * unmodified e2b SDK's `Template` builder against an OCI archive produced on this machine
 * (umoci + skopeo from a rootfs the test makes), COPY uploads through the signed files
 * URL, the layer cache on a second build, a failing step, tags, private isolation between
 * tenants, delete. Needs root (runc, netns, btrfs).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox, Template, waitForPort, type ConnectionOpts, type LogEntry } from "e2b";
import { randomBytes } from "node:crypto";
import { spawnSync } from "node:child_process";
import { startStack, type Stack } from "../support/stack.ts";
import { makeOciArchive, type OciFixture } from "../templates/fixtures.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;

/** Host objects of this suite's node (never another stack's or the node tests'). */
const HOST_SCOPE = {
  SPACE_NODE_BRIDGE: "spctpl0",
  SPACE_NODE_NFT_TABLE: "space_e2e_tpl",
  SPACE_NODE_VETH_PREFIX: "vq",
  SPACE_NODE_CGROUP_PARENT: "space-e2e-tpl",
  SPACE_NODE_SLOT_CIDR: "10.204.0.0/20",
  SPACE_NODE_BTRFS_IMAGE_GIB: "16",
  SPACE_NODE_DISK_RESERVE_MIB: "1024",
};

describe("templates with the e2b SDK", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let oci: OciFixture;
  let ctx: string;
  const sandboxes: Sandbox[] = [];

  before(async () => {
    stack = await startStack({ env: { ...HOST_SCOPE, SPACE_NODE_RUNTIME_STATE_DIR: `/run/space-e2e-tpl-${randomBytes(3).toString("hex")}` } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    oci = await makeOciArchive();
    ctx = await mkdtemp(join(tmpdir(), "space-tpl-ctx-"));
    await writeFile(join(ctx, "hello.txt"), "hello from copy\n");
  });
  after(async () => {
    await Promise.allSettled(sandboxes.map((s) => s.kill()));
    await stack?.stop();
    await oci?.cleanup();
    if (ctx) await rm(ctx, { recursive: true, force: true });
  });

  const recipe = () =>
    Template({ fileContextPath: ctx })
      .fromImage(`oci-archive:${oci.archive}`)
      .setEnvs({ GREETING: "hi" })
      .runCmd('echo "built $GREETING $FIXTURE" > /etc/built.txt', { user: "root" })
      .copy("hello.txt", "/srv/")
      .setWorkdir("/srv");

  test("template_build_from_oci_boots: build from an OCI archive, then Sandbox.create(alias) sees the steps", async () => {
    const logs: LogEntry[] = [];
    const info = await Template.build(recipe(), "oci-tpl", { ...opts, onBuildLogs: (e) => logs.push(e) });
    assert.ok(info.templateId && info.buildId);
    assert.ok(logs.some((l) => /RUN echo/.test(l.message)), "step logs reach the SDK");

    const sb = await Sandbox.create("oci-tpl", opts);
    sandboxes.push(sb);
    const r = await sb.commands.run("cat /etc/built.txt /srv/hello.txt");
    assert.equal(r.stdout, "built hi oci\nhello from copy\n");
    const who = await sb.commands.run("whoami");
    assert.equal(who.stdout, "user\n");
    await sb.kill();

    // Status with a log offset, as the SDK polls it.
    const st = await Template.getBuildStatus({ templateId: info.templateId, buildId: info.buildId }, { ...opts, logsOffset: 2 });
    assert.equal(st.status, "ready");
    assert.ok(st.logEntries.length > 0 && st.logEntries.length < logs.length);
  });

  test("the second build of the same recipe hits the layer cache", async () => {
    const logs: string[] = [];
    const t0 = Date.now();
    await Template.build(recipe(), "oci-tpl", { ...opts, onBuildLogs: (e) => logs.push(e.message) });
    const ms = Date.now() - t0;
    assert.ok(logs.some((m) => /^CACHED \[1\/4\] ENV/.test(m)), logs.join("\n"));
    assert.ok(logs.some((m) => /^CACHED \[2\/4\] RUN/.test(m)));
    assert.ok(logs.some((m) => /^CACHED \[3\/4\] COPY/.test(m)));
    process.stderr.write(`cached rebuild: ${ms} ms\n`);
  });

  test("fromTemplate('base') with runCmd as user, tags, and getTags", async () => {
    const t = Template().fromTemplate("base").runCmd("echo from-base > /home/user/marker");
    const info = await Template.build(t, "from-base:v1", opts);
    const sb = await Sandbox.create("from-base", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /home/user/marker")).stdout, "from-base\n");
    await sb.kill();
    await Template.assignTags("from-base:v1", "prod", opts);
    const tags = await Template.getTags(info.templateId, opts);
    assert.deepEqual(tags.map((x) => x.tag).sort(), ["default", "prod", "v1"]);
    assert.ok(tags.every((x) => x.buildId === info.buildId));
    await Template.removeTags("from-base", "prod", opts);
    assert.deepEqual((await Template.getTags(info.templateId, opts)).map((x) => x.tag).sort(), ["default", "v1"]);
  });

  test("template ENV, WORKDIR and start command apply to sandboxes booted from it", async () => {
    const t = Template()
      .fromTemplate("base")
      .setEnvs({ FOO: "bar", KEEP: "template" })
      .setWorkdir("/srv")
      .setStartCmd("python3 -m http.server 8080", waitForPort(8080));
    await Template.build(t, "start-tpl", opts);
    const sb = await Sandbox.create("start-tpl", { ...opts, envs: { KEEP: "sandbox" } });
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("echo $FOO $KEEP")).stdout, "bar sandbox\n", "template env under the sandbox's own");
    assert.equal((await sb.commands.run("pwd")).stdout, "/srv\n");
    assert.equal((await sb.commands.run("whoami")).stdout, "user\n", "no USER step: the sandbox user stays `user`");
    // The ready command was waited for: the server answers at once.
    const code = await sb.commands.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/");
    assert.equal(code.stdout, "200");
    await sb.kill();
  });

  test("a failing step fails fast with its exit code and output", async () => {
    const t = Template({ fileContextPath: ctx }).fromImage(`oci-archive:${oci.archive}`).runCmd("echo about-to-fail; exit 3");
    await assert.rejects(Template.build(t, "broken-tpl", opts), (e: Error) => /exit code 3/.test(e.message) && /about-to-fail/.test(e.message));
  });

  test("a registry image that cannot be pulled is refused with a message naming it", async () => {
    // Registry images are pulled now (issue 21); a closed local port keeps this test off the Internet.
    const t = Template().fromImage("127.0.0.1:1/python:3.12");
    await assert.rejects(Template.build(t, "registry-tpl", opts), /registry 127\.0\.0\.1:1 is unreachable for docker:\/\/127\.0\.0\.1:1\/python:3\.12/);
  });

  test("private_template_build_isolation: another tenant cannot see or boot the template", async () => {
    const admin = { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" };
    const tenant = (await (await fetch(`${stack.apiUrl}/admin/api/v1/tenants`, { method: "POST", headers: admin, body: JSON.stringify({ name: "other-team" }) })).json()) as { id: string };
    const key = (await (await fetch(`${stack.apiUrl}/admin/api/v1/tenants/${tenant.id}/keys`, { method: "POST", headers: admin, body: "{}" })).json()) as { key: string };
    const other = { ...opts, apiKey: key.key };
    await assert.rejects(Sandbox.create("oci-tpl", other), /not found/i);
    const alias = await fetch(`${stack.apiUrl}/templates/aliases/oci-tpl`, { headers: { "x-api-key": key.key } });
    assert.equal(alias.status, 403);
    const mine = (await (await fetch(`${stack.apiUrl}/templates/aliases/oci-tpl`, { headers: { "x-api-key": stack.apiKey } })).json()) as { templateID: string };
    const tags = await fetch(`${stack.apiUrl}/templates/${mine.templateID}/tags`, { headers: { "x-api-key": key.key } });
    assert.equal(tags.status, 404);
    // The other tenant may use the same name for its own template.
    const own = await Template.build(Template().fromTemplate("base").runCmd("true"), "oci-tpl", other);
    assert.notEqual(own.templateId, mine.templateID);
  });

  test("space template build <dir> --name: Dockerfile with FROM oci-archive, COPY, RUN; live logs", async () => {
    await writeFile(join(ctx, "image.tar"), await import("node:fs/promises").then((f) => f.readFile(oci.archive)));
    await writeFile(join(ctx, "Dockerfile"), "FROM oci-archive:image.tar\nCOPY hello.txt /opt/\nRUN cat /opt/hello.txt > /etc/from-cli\nENV MODE=cli\n");
    const r = spawnSync(process.execPath, ["bin/space.mjs", "template", "build", ctx, "--name", "cli-tpl"], {
      env: { ...process.env, E2B_API_URL: stack.apiUrl, E2B_API_KEY: stack.apiKey },
      encoding: "utf8",
      timeout: 300_000,
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /\[2\] \[2\/3\] RUN cat/);
    assert.match(r.stderr, /ready: template/);
    const sb = await Sandbox.create("cli-tpl", opts);
    sandboxes.push(sb);
    assert.equal((await sb.commands.run("cat /etc/from-cli")).stdout, "hello from copy\n");
    await sb.kill();
  });

  test("DELETE /templates/{id}: gone for creates; 404 the second time", async () => {
    const t = await Template.build(Template().fromTemplate("base").runCmd("true"), "to-delete", opts);
    const del = () => fetch(`${stack.apiUrl}/templates/${t.templateId}`, { method: "DELETE", headers: { "x-api-key": stack.apiKey } });
    assert.equal((await del()).status, 204);
    const again = await del();
    assert.equal(again.status, 404);
    assert.equal(((await again.json()) as { code: number }).code, 404);
    await assert.rejects(Sandbox.create("to-delete", opts), /not found/i);
  });
});
