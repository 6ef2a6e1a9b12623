/**
 * Templates as E2B users expect them (issue 20 items 7 and 13), through the unmodified e2b
 * JS SDK against the real stack: the built-in `base` answers the aliases endpoint, names
 * and tags are validated, build ids are UUIDs, `copy('folder/*', dest)` copies what the
 * glob matched, and the `base` template has python/pip, Node.js with npm, git and curl
 * (`pip install` without PEP 668 errors, `Template().pipInstall()` of a local wheel).
 * Needs root (runc, netns, btrfs). No internet: packages are local wheels (`--no-index`).
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Sandbox, Template, type ConnectionOpts } from "e2b";
import { startStack, type Stack } from "../support/stack.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, network namespaces, btrfs)" : false;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe("templates as E2B users expect them", { skip, timeout: 20 * 60_000 }, () => {
  let stack: Stack;
  let opts: ConnectionOpts & { sandboxUrl: string };
  let ctx: string;
  const sandboxes: Sandbox[] = [];

  before(async () => {
    stack = await startStack({ env: { SPACE_NODE_BTRFS_IMAGE_GIB: "16" } });
    opts = { apiKey: stack.apiKey, apiUrl: stack.apiUrl, sandboxUrl: stack.sandboxUrl, requestTimeoutMs: 120_000 };
    ctx = await mkdtemp(join(tmpdir(), "space-tpl-compat-"));
    await mkdir(join(ctx, "folder", "sub"), { recursive: true });
    await writeFile(join(ctx, "folder", "a.txt"), "a\n");
    await writeFile(join(ctx, "folder", "b.txt"), "b\n");
    await writeFile(join(ctx, "folder", "sub", "c.txt"), "c\n");
    await writeFile(join(ctx, "spacedemo-1.0-py3-none-any.whl"), wheel("spacedemo", "1.0", 'ANSWER = 42\n'));
  });
  after(async () => {
    await Promise.allSettled(sandboxes.map((s) => s.kill()));
    await stack?.stop();
    if (ctx) await rm(ctx, { recursive: true, force: true });
  });

  const create = async (template = "base") => {
    const sb = await Sandbox.create(template, opts);
    sandboxes.push(sb);
    return sb;
  };
  /** A command's output; a non-zero exit fails with its output (the SDK throws CommandExitError). */
  const run = async (sb: Sandbox, cmd: string, o: { user?: "root" | "user" } = {}) => {
    try {
      return (await sb.commands.run(cmd, { ...o, timeoutMs: 120_000 })).stdout;
    } catch (e) {
      const r = e as { exitCode?: number; stdout?: string; stderr?: string; message: string };
      assert.fail(`${cmd} failed (exit ${r.exitCode ?? "?"}): ${r.stderr ?? ""}${r.stdout ?? ""} ${r.message}`);
    }
  };

  test("GET /templates/aliases/base answers as existing (public), as E2B's built-in does", async () => {
    assert.equal(await Template.exists("base", opts), true);
    const r = await fetch(`${stack.apiUrl}/templates/aliases/base`, { headers: { "x-api-key": stack.apiKey } });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), { templateID: "base", public: true });
    assert.equal(await Template.exists("no-such-template", opts), false);
  });

  test("names and tags are validated: ':x', 'name:' and bad tags are 400 naming the value", async () => {
    const post = (body: unknown) =>
      fetch(`${stack.apiUrl}/v3/templates`, { method: "POST", headers: { "x-api-key": stack.apiKey, "content-type": "application/json" }, body: JSON.stringify(body) });
    for (const [body, named] of [
      [{ name: ":x" }, '":x"'],
      [{ name: "name:" }, '"name:"'],
      [{ name: "ok-name", tags: ["Bad Tag"] }, '"Bad Tag"'],
    ] as const) {
      const r = await post(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      const e = (await r.json()) as { code: number; message: string };
      assert.equal(e.code, 400);
      assert.ok(e.message.includes(named), `${e.message} names ${named}`);
    }
    await assert.rejects(Template.build(Template().fromTemplate("base"), "name:", opts), /"name:"/);
    await assert.rejects(Template.assignTags(":x", "prod", opts), /":x"/);
    await assert.rejects(Template.assignTags("name:", "prod", opts), /"name:"/);
    await assert.rejects(Template.removeTags("name:", "prod", opts), /"name:"/);
  });

  test("build ids are UUIDs (the spec's format: uuid), in the build, its status and its tags", async () => {
    const info = await Template.build(Template().fromTemplate("base").runCmd("true"), "uuid-tpl:v1", opts);
    assert.match(info.buildId, UUID);
    const st = await Template.getBuildStatus({ templateId: info.templateId, buildId: info.buildId }, opts);
    assert.equal(st.status, "ready");
    assert.equal(st.buildID, info.buildId);
    const assigned = await Template.assignTags("uuid-tpl:v1", "prod", opts);
    assert.match(assigned.buildId, UUID);
    const tags = await Template.getTags(info.templateId, opts);
    assert.deepEqual(tags.map((t) => t.tag).sort(), ["default", "prod", "v1"]);
    for (const t of tags) assert.equal(t.buildId, info.buildId);
    // A tag that is a UUID would be ambiguous with a build id: refused, as E2B does.
    await assert.rejects(Template.assignTags("uuid-tpl:v1", info.buildId, opts), /UUID/);
  });

  test("copy('folder/*', dest) copies the matched entries into dest, not the upload root", async () => {
    const t = Template({ fileContextPath: ctx })
      .fromTemplate("base")
      .copy("folder/*", "/opt/glob")
      .copy("folder/*.txt", "/opt/txt/")
      .copy("folder", "/opt/dir")
      .copy("folder/a.txt", "/opt/one.txt")
      .setWorkdir("/home/user")
      .copy("folder/*", "folder");
    await Template.build(t, "copy-tpl", opts);
    const sb = await create("copy-tpl");
    const ls = async (dir: string) => (await run(sb, `cd ${dir} && find . -mindepth 1 | sort`)).trim().split("\n");
    assert.deepEqual(await ls("/opt/glob"), ["./a.txt", "./b.txt", "./sub", "./sub/c.txt"]);
    assert.deepEqual(await ls("/opt/txt"), ["./a.txt", "./b.txt"]);
    assert.deepEqual(await ls("/opt/dir"), ["./a.txt", "./b.txt", "./sub", "./sub/c.txt"]);
    assert.equal(await run(sb, "cat /opt/one.txt"), "a\n");
    assert.deepEqual(await ls("/home/user/folder"), ["./a.txt", "./b.txt", "./sub", "./sub/c.txt"]);
  });

  test("base: python and python3, Node.js with npm, git, curl", async () => {
    const sb = await create();
    assert.match(await run(sb, "python --version"), /^Python 3\.\d+\.\d+\n$/);
    assert.match(await run(sb, "python3 --version"), /^Python 3\.\d+\.\d+\n$/);
    assert.match(await run(sb, "pip --version"), /^pip \d+/);
    assert.equal(await run(sb, "node -e 'console.log(6 * 7)'"), "42\n");
    assert.match(await run(sb, "npm --version"), /^\d+\.\d+\.\d+\n$/);
    assert.match(await run(sb, "git --version"), /^git version \d/);
    assert.match(await run(sb, "curl --version"), /^curl \d/);
  });

  test("base: pip install of a local wheel (--no-index) succeeds without a PEP 668 error, as user and as root", async () => {
    const sb = await create();
    const whl = await readFile(join(ctx, "spacedemo-1.0-py3-none-any.whl"));
    await sb.files.write("/tmp/spacedemo-1.0-py3-none-any.whl", whl.buffer.slice(whl.byteOffset, whl.byteOffset + whl.byteLength) as ArrayBuffer);
    const out = await run(sb, "pip install --no-index /tmp/spacedemo-1.0-py3-none-any.whl 2>&1");
    assert.doesNotMatch(out, /externally-managed-environment/);
    assert.equal(await run(sb, "python -c 'import spacedemo; print(spacedemo.ANSWER)'"), "42\n");
    // root's Python does not see the user's ~/.local: this is the system-wide install.
    await run(sb, "pip install --no-index /tmp/spacedemo-1.0-py3-none-any.whl 2>&1", { user: "root" });
    assert.match(await run(sb, "cd / && python3 -c 'import spacedemo; print(spacedemo.__file__)'", { user: "root" }), /^\/usr\/local\/lib\/python3\.\d+\/dist-packages\/spacedemo\.py\n$/);
  });

  test("Template().pipInstall() of a local package builds, and sandboxes import it", async () => {
    const t = Template({ fileContextPath: ctx })
      .fromTemplate("base")
      .copy("spacedemo-1.0-py3-none-any.whl", "/tmp/")
      .pipInstall(["--no-index", "/tmp/spacedemo-1.0-py3-none-any.whl"]);
    await Template.build(t, "pip-tpl", opts);
    const sb = await create("pip-tpl");
    assert.equal(await run(sb, "python -c 'import spacedemo; print(spacedemo.ANSWER)'"), "42\n");
  });
});

/** A pure-Python wheel of one module (a stored zip: METADATA, WHEEL, RECORD with hashes). */
function wheel(name: string, version: string, source: string): Buffer {
  const info = `${name}-${version}.dist-info`;
  const files: Array<[string, Buffer]> = [
    [`${name}.py`, Buffer.from(source)],
    [`${info}/METADATA`, Buffer.from(`Metadata-Version: 2.1\nName: ${name}\nVersion: ${version}\n`)],
    [`${info}/WHEEL`, Buffer.from("Wheel-Version: 1.0\nGenerator: space-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")],
  ];
  const record = files.map(([p, b]) => `${p},sha256=${createHash("sha256").update(b).digest("base64url")},${b.length}\n`).join("") + `${info}/RECORD,,\n`;
  files.push([`${info}/RECORD`, Buffer.from(record)]);
  const locals: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const [path, data] of files) {
    const n = Buffer.from(path);
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(n.length, 26);
    locals.push(local, n, data);
    const c = Buffer.alloc(46);
    c.writeUInt32LE(0x02014b50, 0);
    c.writeUInt16LE(20, 4);
    c.writeUInt16LE(20, 6);
    c.writeUInt32LE(crc, 16);
    c.writeUInt32LE(data.length, 20);
    c.writeUInt32LE(data.length, 24);
    c.writeUInt16LE(n.length, 28);
    c.writeUInt32LE(offset, 42);
    central.push(c, n);
    offset += local.length + n.length + data.length;
  }
  const cd = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...locals, cd, end]);
}
