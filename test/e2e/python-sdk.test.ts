/**
 * ECW end to end with the official e2b Python SDK (pinned in scripts/setup/python-sdk.txt,
 * installed into .tools/py by scripts/setup/python-sdk.sh), sync and async, against one
 * real stack. Each scenario group is a script under test/e2e/python/ that records what
 * it observed per step as JSON; the assertions live here. Needs root and the venv.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { baseEnv } from "../support/space-process.ts";
import { startStack, waitFor, type Stack } from "../support/stack.ts";
import { localRegistrySkipReason, startLocalRegistry } from "../support/local-registry.ts";
import { makeOciArchive } from "../templates/fixtures.ts";

const PYTHON = resolve(".tools/py/bin/python");
const SCRIPTS = resolve("test/e2e/python");

function skipReason(): string | false {
  if (process.getuid?.() !== 0) return "needs root (runc, network namespaces, btrfs)";
  if (!existsSync(PYTHON)) return `no Python SDK venv at ${PYTHON}; run scripts/setup/python-sdk.sh`;
  const probe = spawnSync(PYTHON, ["-c", "import e2b"], { encoding: "utf8" });
  if (probe.status !== 0) return `the venv at ${PYTHON} cannot import e2b: ${probe.stderr.trim().slice(-300)}; rerun scripts/setup/python-sdk.sh`;
  return false;
}

type Observed = Record<string, unknown>;
type Step = { error?: string; trace?: string } & Record<string, unknown>;

describe("ECW with the e2b Python SDK", { skip: skipReason(), timeout: 20 * 60_000 }, () => {
  let stack: Stack;

  before(async () => {
    stack = await startStack();
  });
  after(async () => {
    await stack?.stop();
  });

  /** Runs one scenario script (against `on`, the shared stack by default); fails with its stderr when it does not print its JSON. */
  function run(script: string, on: Stack = stack, extraEnv: Record<string, string> = {}): Promise<Observed> {
    const env = {
      ...baseEnv(),
      E2B_API_KEY: on.apiKey,
      E2B_API_URL: on.apiUrl,
      E2B_SANDBOX_URL: on.sandboxUrl,
      PYTHONUNBUFFERED: "1",
      PYTHONDONTWRITEBYTECODE: "1",
      ...extraEnv,
    };
    return new Promise((res, rej) => {
      execFile(PYTHON, [resolve(SCRIPTS, script)], { env, cwd: SCRIPTS, timeout: 8 * 60_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
        const last = stdout.trim().split("\n").pop() ?? "";
        try {
          res(JSON.parse(last) as Observed);
        } catch {
          rej(new Error(`${script} printed no JSON (${err?.message ?? "exit 0"}):\n${stderr.slice(-4000)}\n${stdout.slice(-2000)}\n${on.output().slice(-2000)}`));
        }
      });
    });
  }

  /** The step's value; a recorded exception fails with the SDK's own message and trace. */
  function ok(o: Observed, name: string): unknown {
    assert.ok(name in o, `step ${name} did not run`);
    const v = o[name] as Step;
    if (v && typeof v === "object" && !Array.isArray(v) && typeof v.error === "string" && "trace" in v) {
      assert.fail(`step ${name} raised ${v.error}\n${v.trace}`);
    }
    return v;
  }

  test("lifecycle (sync): create with metadata/envs/timeout, info, set_timeout, list, pause/connect, kill", async () => {
    const o = await run("lifecycle.py");
    assert.equal(ok(o, "env"), "bar baz\n");
    assert.equal(ok(o, "running"), true);
    const info = ok(o, "info") as Record<string, unknown>;
    assert.equal(info.sandbox_id, o.id);
    assert.equal(info.template_id, "base");
    assert.deepEqual(info.metadata, { suite: "py", tag: (info.metadata as Record<string, string>).tag, "a b": "c&d" });
    assert.equal(info.state, "running");
    assert.equal(info.envd_version, "0.6.13");
    assert.equal(info.ttl_s, 120);
    assert.equal(info.started_recent, true);
    assert.equal(info.on_timeout, "kill");
    assert.ok((ok(o, "set_timeout") as { extended_s: number }).extended_s >= 470, "set_timeout(600) moves end_at from ~120 s to ~600 s");
    assert.equal(ok(o, "class_get_info"), o.id);
    const pages = ok(o, "list_pages") as { page_sizes: number[]; ids: string[] };
    assert.deepEqual(pages.page_sizes, [2, 1]);
    assert.deepEqual(pages.ids, o.expected_ids);
    const filtered = ok(o, "list_filter") as { id: string; state: string; template: string }[];
    assert.deepEqual(filtered.map((s) => [s.id, s.state, s.template]), [[o.id, "running", "base"]]);
    assert.equal(ok(o, "list_none"), 0);
    assert.equal(ok(o, "get_host"), `8080-${o.id as string}.localhost:${new URL(stack.sandboxUrl).port}`, "no SPACE_SANDBOX_DOMAIN: space up's localhost:<gateway port>");
    const metrics = ok(o, "metrics") as { cpu_count: number; mem_total: number }[];
    assert.ok(metrics.length >= 1 && metrics[0]!.cpu_count > 0 && metrics[0]!.mem_total > 0);
    assert.equal(ok(o, "pause"), true);
    assert.equal(ok(o, "pause_again"), false, "pausing a paused sandbox answers 409 → False");
    assert.equal(ok(o, "paused_state"), "paused");
    assert.deepEqual(ok(o, "paused_list"), [o.id]);
    assert.deepEqual(ok(o, "resume"), { file: "kept", env: "bar baz\n", state: "running" });
    assert.equal(ok(o, "connect_running"), "again\n");
    assert.equal(ok(o, "kill"), true);
    assert.equal(ok(o, "kill_again"), false);
    assert.equal(ok(o, "running_after_kill"), false);
    assert.equal(ok(o, "connect_killed"), "SandboxNotFoundException");
    assert.equal(ok(o, "info_killed"), "SandboxNotFoundException");
    assert.equal(ok(o, "unknown_template"), "SandboxException");
  });

  test("commands (sync): output, exit codes, env/cwd/user, timeout, background + kill, stdin, reconnect, PTY", async () => {
    const o = await run("commands.py");
    assert.deepEqual(ok(o, "basic"), { stdout: "out\n", stderr: "err\n", exit_code: 0, error: null });
    assert.deepEqual(ok(o, "failing"), { exit_code: 3, stdout: "partial\n", stderr: "bad\n" });
    assert.equal(ok(o, "env"), "x y-z\n");
    assert.equal(ok(o, "cwd"), "/tmp\n");
    assert.equal(ok(o, "default_identity"), "user\n/home/user\n/home/user\n");
    assert.equal(ok(o, "root"), "root\n/root\n");
    assert.deepEqual(ok(o, "callbacks"), { stdout: "o1\no2\no3\n", stderr: "e1\ne2\ne3\n" });
    assert.equal(ok(o, "timeout"), "TimeoutException");
    assert.deepEqual(ok(o, "large"), { len: 4_040_000, lines: 40_000 });
    assert.deepEqual(ok(o, "background"), { pid_int: true, stdout: "done\n" });
    assert.deepEqual(ok(o, "kill_bg"), {
      listed: true,
      cmd: "/bin/bash",
      args: ["-l", "-c", "sleep 300"],
      killed: true,
      wait: { exit_code: -1, error: "signal: killed" },
      kill_again: false,
    });
    assert.equal(ok(o, "handle_kill"), true);
    assert.equal(ok(o, "stdin"), "hello stdin\n");
    assert.equal(ok(o, "stream_input"), "abc\n", "client-streaming StreamInput");
    assert.equal(ok(o, "reconnect"), 0);
    assert.equal(ok(o, "connect_missing"), "NotFoundException");
    assert.match(ok(o, "pty") as string, /pty-42/);
  });

  test("files (sync): text/bytes/stream/gzip, multi-write, metadata, list, make_dir, rename, remove, info, watch, signed URLs", async () => {
    const o = await run("files.py");
    assert.deepEqual(ok(o, "write_text"), { name: "a.txt", path: "/home/user/dir/a.txt", type: "file", read: "alpha" });
    assert.equal(ok(o, "relative"), "rel");
    assert.deepEqual(ok(o, "binary"), { bytes_equal: true, stream_equal: true });
    assert.deepEqual(ok(o, "octet_and_gzip"), { io_equal: true, gz: true });
    assert.deepEqual(ok(o, "multi"), { paths: ["/home/user/m/one.txt", "/home/user/m/two.txt"], two: "2" });
    assert.deepEqual(ok(o, "metadata"), { owner: "py" });
    assert.equal(ok(o, "empty"), "");
    const fileEntry = { name: "a.txt", type: "file", path: "/home/user/dir/a.txt", size: 5, mode: "0o644", permissions: "-rw-r--r--", owner: "user", group: "user", modified: true, symlink_target: null };
    assert.deepEqual(ok(o, "list"), [fileEntry]);
    assert.deepEqual(ok(o, "list_depth"), ["/home/user/m/one.txt", "/home/user/m/two.txt"]);
    assert.deepEqual(ok(o, "make_dir"), [true, false]);
    assert.deepEqual(ok(o, "exists"), [true, false]);
    assert.deepEqual(ok(o, "get_info_file"), fileEntry);
    const dir = ok(o, "get_info_dir") as Record<string, unknown>;
    assert.deepEqual([dir.type, dir.mode, dir.permissions, dir.owner], ["dir", "0o755", "drwxr-xr-x", "user"]);
    const link = ok(o, "symlink") as Record<string, unknown>;
    assert.deepEqual([link.type, link.symlink_target], ["file", "/home/user/dir/a.txt"]);
    assert.deepEqual(ok(o, "rename"), { ...fileEntry, name: "b.txt", path: "/home/user/dir/b.txt" });
    assert.deepEqual(ok(o, "after_rename"), [false, "alpha"]);
    assert.deepEqual(ok(o, "remove"), [null, false]);
    assert.equal(ok(o, "read_missing"), "FileNotFoundException");
    assert.equal(ok(o, "list_missing"), "FileNotFoundException");
    assert.equal(ok(o, "info_missing"), "FileNotFoundException");
    assert.equal(ok(o, "as_root"), "/root/r.txt");
    assert.equal(ok(o, "owner_user"), "user:user\nuser:user\n");
    const watch = ok(o, "watch") as [string, string][];
    for (const e of [["f.txt", "create"], ["f.txt", "write"], ["sub", "create"], ["f.txt", "remove"]]) {
      assert.ok(watch.some(([n, t]) => n === e[0] && t === e[1]), `watch saw ${e.join(" ")}: ${JSON.stringify(watch)}`);
    }
    const rec = ok(o, "watch_recursive") as { name: string; type: string; entry: string | null }[];
    assert.ok(rec.some((e) => e.name === "inner/deep.txt" && e.type === "create" && e.entry === "deep.txt"), JSON.stringify(rec));
    assert.equal(ok(o, "watch_missing"), "FileNotFoundException");
    assert.deepEqual(ok(o, "signed_urls"), { read: "signed body", sdk: "signed body" });
  });

  test("async SDK: commands, files, watch callback, list, set_timeout, pause/connect, kill", async () => {
    const o = await run("async_sdk.py");
    assert.deepEqual(ok(o, "basic"), { stdout: "async\n", stderr: "err\n", exit_code: 0 });
    assert.equal(ok(o, "failing"), 7);
    assert.equal(ok(o, "options"), "1\n/tmp\nroot\n");
    assert.deepEqual(ok(o, "concurrent"), ["0\n", "1\n", "2\n", "3\n", "4\n"]);
    assert.deepEqual(ok(o, "background"), { killed: true, wait: -1, kill_again: false });
    assert.equal(ok(o, "stdin"), "via async\n");
    assert.deepEqual(ok(o, "files"), {
      text: "async text",
      bytes_equal: true,
      made: true,
      listed: ["b.bin", "d", "x.txt"],
      moved: "/home/user/a/y.txt",
      exists: [true, false],
      info: { size: 10, type: "file" },
    });
    assert.equal(ok(o, "read_missing"), "FileNotFoundException");
    const watch = ok(o, "watch") as [string, string][];
    assert.ok(watch.some(([n, t]) => n === "n.txt" && t === "create") && watch.some(([n, t]) => n === "n.txt" && t === "write"), JSON.stringify(watch));
    assert.equal(ok(o, "list"), true);
    assert.ok((ok(o, "set_timeout") as number) >= 700, "set_timeout(900) moves end_at by ~720 s");
    assert.deepEqual(ok(o, "pause_connect"), { paused: true, state: "paused", file: "keep\n", state_after: "running" });
    assert.equal(ok(o, "kill"), true);
    assert.equal(ok(o, "running_after_kill"), false);
    assert.equal(ok(o, "connect_killed"), "SandboxNotFoundException");
  });

  test("extras: network options and update, traffic token, lifecycle, Idempotency-Key, fork, named snapshots", async () => {
    const o = await run("extras.py");
    const net = ok(o, "network") as Record<string, unknown>;
    assert.deepEqual(net.network, { allow_out: ["1.1.1.1", "10.0.0.0/8"], deny_out: ["0.0.0.0/0"] });
    assert.deepEqual(net.after, { deny_out: ["8.8.8.8"] });
    assert.equal(ok(o, "no_internet"), false);
    assert.deepEqual(ok(o, "public_traffic"), { token: true, with_token: 200, without_token: 403 });
    assert.deepEqual(ok(o, "lifecycle"), { on_timeout: "pause", auto_resume: false });
    assert.deepEqual(ok(o, "idempotency"), { same: true, other: true, usable: "idem\n" });
    assert.deepEqual(ok(o, "fork"), { forks: [{ file: "forked", distinct: true }, { file: "forked", distinct: true }], source_running: true });
    const snaps = ok(o, "snapshots") as Record<string, unknown>;
    assert.deepEqual(
      { listed: snaps.listed, restored: snaps.restored, by_name: snaps.by_name, deleted: snaps.deleted, deleted_again: snaps.deleted_again },
      { listed: true, restored: "snap", by_name: "snap", deleted: true, deleted_again: false },
    );
  });

  test("file details (sync): metadata as xattrs and in the write answer, remove of a missing path, symlinks, directory size, command timeout", async () => {
    const o = await run("file_details.py");
    assert.deepEqual(ok(o, "write_metadata"), { written: { owner: "py", k: "v" }, info: { owner: "py", k: "v" } });
    assert.equal(ok(o, "xattrs"), "[('user.e2b.k', 'v'), ('user.e2b.owner', 'py')]");
    assert.deepEqual(ok(o, "overwrite_clears"), { written: null, info: null });
    assert.deepEqual(ok(o, "set_inside"), { foo: "bar" });
    assert.deepEqual(ok(o, "remove_missing"), [null, false]);
    assert.deepEqual(ok(o, "symlink"), { file: ["file", "/home/user/pm/f", "0o640"], dir: ["dir", "/home/user/pm/d"] });
    assert.equal(ok(o, "dir_size"), 4096);
    assert.equal(ok(o, "timeout"), "TimeoutException");
  });

  test("templates: base exists, UUID build ids parse in assign_tags/get_tags, names validated, glob COPY, base has python/pip/node/npm", async () => {
    const o = await run("templates_compat.py");
    assert.equal(ok(o, "base_exists"), true);
    const built = ok(o, "build") as { build_id: string; uuid: boolean };
    assert.equal(built.uuid, true, `build id ${built.build_id} is a UUID`);
    assert.deepEqual(ok(o, "tags"), { assigned: built.build_id, tags: ["default", "prod", "v1"], builds: [built.build_id] });
    assert.match(ok(o, "bad_name") as string, /"name:"/);
    assert.match(ok(o, "bad_target") as string, /":x"/);
    const sb = ok(o, "sandbox") as Record<string, string>;
    assert.equal(sb.glob, "./a.txt\n./sub\n./sub/c.txt\n");
    assert.match(sb.python!, /^Python 3\./);
    assert.doesNotMatch(sb.pip!, /externally-managed-environment/);
    assert.equal(sb.node, "42\n");
    assert.match(sb.npm!, /^\d+\.\d+\.\d+\n$/);
  });

  test("filesystem-only pause: pause(mode='filesystem'), keep_memory=False, on_timeout mode filesystem, connect(on_resume='reboot') boot fresh from the disk", async () => {
    const o = await run("pause_filesystem.py");
    const fresh = { file: o.marker, processes: "0", user: "user\n" };
    assert.deepEqual(ok(o, "mode_filesystem"), { before: "1", paused: true, state: "paused", ...fresh });
    assert.deepEqual(ok(o, "keep_memory_false"), fresh);
    assert.deepEqual(ok(o, "on_timeout"), fresh);
    assert.deepEqual(ok(o, "reboot"), fresh);
  });

  test("telemetry: get_metrics(start, end) history (truncated seconds), logs through the SDK's API client", async () => {
    const o = await run("telemetry.py");
    assert.deepEqual(ok(o, "history"), { count_at_least_2: true, increasing: true, within: true, one: [true] });
    const logs = ok(o, "logs") as { status: number; started: number; levels: string[]; aware: boolean };
    assert.equal(logs.status, 200);
    assert.equal(logs.started, 1);
    assert.ok(logs.levels.length > 0 && !logs.levels.includes("debug"), JSON.stringify(logs.levels));
    assert.equal(logs.aware, true);
  });

  test("hardening: malformed create input is 400 naming the field; files with the requesting user's rights", async () => {
    const o = await run("hardening.py");
    const refused = (name: string, field: RegExp) => {
      const e = ok(o, name) as { class: string; message: string };
      assert.equal(e.class, "SandboxException", JSON.stringify(e));
      assert.match(e.message, /^400: /, name);
      assert.match(e.message, field, name);
      assert.doesNotMatch(e.message, /0x00|UTF8|invalid byte sequence/, "no database text");
    };
    refused("nul_metadata", /metadata\.a/);
    refused("nul_env", /envVars\.A/);
    refused("big_env", /envVars\.BIG/);
    refused("big_metadata", /at most 16384 bytes/);
    for (const name of ["read_shadow", "write_root", "list_root"]) {
      const e = ok(o, name) as { class: string; message: string };
      assert.match(e.message, /permission denied|PERMISSION_DENIED/, `${name}: ${JSON.stringify(e)}`);
    }
    assert.deepEqual(ok(o, "own"), { read: "mine", owner: "user" });
    assert.equal(ok(o, "root_reads_shadow"), true);
  });

  test("killed mid-stream: commands.run / wait raise the SDK's sandbox-gone error over HTTP/1.1 and h2 (TLS); h2c round trip", async (t) => {
    const expectKilled = (o: Observed, name: string) => {
      const v = o[name] as { raised?: string | null; message?: string };
      assert.equal(v.raised, "SandboxNotRunningException", `${name}: ${JSON.stringify(v)}`);
      assert.match(v.message ?? "", /The sandbox was killed or reached its end of life while the request was in flight/);
    };
    const plain = await run("killed_stream.py");
    assert.deepEqual(ok(plain, "http2"), { http_version: "HTTP/2", status: 204 }, "h2c with prior knowledge");
    for (const name of ["killed_run", "killed_wait", "killed_run_async"]) expectKilled(plain, name);

    // Over TLS the SDK speaks h2 (ALPN) as it does to E2B's edge: a kill resets the stream.
    const dir = mkdtempSync(join(tmpdir(), "space-gw-tls-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const ca = join(dir, "ca.pem");
    const openssl = (args: string[]) => assert.equal(spawnSync("openssl", args, { cwd: dir, encoding: "utf8" }).status, 0, `openssl ${args.join(" ")}`);
    openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", ca, "-subj", "/CN=space test CA", "-days", "1"]);
    openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "gw.key", "-out", "gw.csr", "-subj", "/CN=localhost"]);
    writeFileSync(join(dir, "ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n");
    openssl(["x509", "-req", "-in", "gw.csr", "-CA", ca, "-CAkey", "ca.key", "-CAcreateserial", "-out", "gw.pem", "-days", "1", "-extfile", "ext.cnf"]);
    const tlsStack = await startStack({ env: { SPACE_GATEWAY_TLS_CERT: join(dir, "gw.pem"), SPACE_GATEWAY_TLS_KEY: join(dir, "gw.key") } });
    t.after(() => tlsStack.stop());
    assert.match(tlsStack.sandboxUrl, /^https:/);
    const overTls = await run("killed_stream.py", tlsStack, { SSL_CERT_FILE: ca });
    assert.deepEqual(ok(overTls, "http2"), { http_version: "HTTP/2", status: 204 }, "h2 by ALPN");
    for (const name of ["killed_run", "killed_wait", "killed_run_async"]) expectKilled(overTls, name);
  });

  test("async SDK (issue 20): file metadata (multipart, gzip octet-stream, write_files), filesystem details, command timeout, metrics range, pause(mode='filesystem') and connect(on_resume='reboot') boot fresh, started_after", async () => {
    const o = await run("async_details.py");
    assert.deepEqual(ok(o, "write_metadata"), { written: { owner: "pyasync", k: "v" }, info: { owner: "pyasync", k: "v" } });
    assert.deepEqual(ok(o, "gzip_metadata"), { written: { via: "octet" }, info: { via: "octet" }, size: 600 });
    assert.deepEqual(ok(o, "write_files_metadata"), [
      ["/home/user/pam/m1.txt", { batch: "b1" }],
      ["/home/user/pam/m2.txt", { batch: "b1" }],
    ]);
    assert.deepEqual(ok(o, "overwrite_clears"), { written: null, info: null });
    assert.deepEqual(ok(o, "set_inside"), { foo: "bar" });
    assert.equal(ok(o, "remove_missing"), false);
    assert.deepEqual(ok(o, "symlink"), {
      file: ["file", "/home/user/pal/f", "0o640"],
      dir: ["dir", "/home/user/pal/d"],
      listed: [["d", "dir"], ["dangling", "symlink"], ["f", "file"], ["ld", "dir"], ["lf", "file"]],
    });
    assert.equal(ok(o, "dir_size"), 4096);
    assert.equal(ok(o, "timeout"), "TimeoutException");
    assert.deepEqual(ok(o, "metrics"), { count_at_least_2: true, increasing: true });
    assert.deepEqual(ok(o, "mode_filesystem"), { before: "1", paused: true, state: "paused", file: o.marker, processes: "0" });
    assert.deepEqual(ok(o, "reboot"), { full: "1", file: o.marker, processes: "0" });
    assert.deepEqual(ok(o, "started_after"), { at: true, later: [] });
  });

  test("from_image with registry credentials (issue 21): a private image refused without and with wrong credentials (4xx naming the registry), built with the right ones", { skip: localRegistrySkipReason() }, async (t) => {
    const creds = { username: "pyuser", password: `pw-${Date.now().toString(36)}` };
    const registry = await startLocalRegistry({ auth: creds });
    t.after(() => registry.stop());
    const oci = await makeOciArchive();
    t.after(() => oci.cleanup());
    await registry.push(`oci-archive:${oci.archive}`, "private/app:v1");
    const regStack = await startStack({ env: { SPACE_REGISTRY_INSECURE: registry.host } });
    t.after(() => regStack.stop());
    const o = await run("registry_image.py", regStack, { REGISTRY_IMAGE: `${registry.host}/private/app:v1`, REGISTRY_USER: creds.username, REGISTRY_PASSWORD: creds.password });
    const host = registry.host.replace(/\./g, "\\.");
    const none = ok(o, "no_credentials") as { class: string; message: string } | null;
    assert.ok(none, "the build without credentials was refused");
    assert.match(none.message, new RegExp(`^4\\d\\d: registry ${host} refused .* without credentials`));
    const wrong = ok(o, "wrong_credentials") as { class: string; message: string } | null;
    assert.ok(wrong, "the build with wrong credentials was refused");
    assert.match(wrong.message, new RegExp(`^4\\d\\d: registry ${host} refused the credentials`));
    assert.doesNotMatch(wrong.message, /not-the-password/);
    assert.deepEqual(ok(o, "right_credentials"), { file: "from layer 2\n", pinned: true });
  });

  test("quotas and rate limits (issues 24, 27): RateLimitException naming the limit; with retries the SDK waits out Retry-After", async () => {
    const admin = async (method: string, path: string, body: unknown) => {
      const res = await fetch(`${stack.apiUrl}/admin/api/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${stack.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      assert.ok(res.ok, `${method} ${path}: ${res.status}`);
      return (await res.json()) as Record<string, unknown>;
    };
    const tenantWith = async (name: string, quotas: Record<string, number>) => {
      const t = await admin("POST", "/tenants", { name });
      await admin("PUT", `/tenants/${String(t.id)}/quotas`, quotas);
      return String((await admin("POST", `/tenants/${String(t.id)}/keys`, {})).key);
    };
    const quotaKey = await tenantWith("py-quota-one", { sandboxes: 1 });
    const rateKey = await tenantWith("py-rate-slow", { creates_per_s: 0.25, create_burst: 1 });
    const o = await run("quotas.py", stack, { E2B_API_KEY: quotaKey, QUOTA_RATE_KEY: rateKey });
    assert.equal(ok(o, "quota_first"), "accepted");
    assert.deepEqual(ok(o, "quota_second"), { class: "RateLimitException", message: "429: Rate limit exceeded, please try again later. - tenant quota exceeded: sandboxes 1 of 1" });
    assert.equal(ok(o, "rate_first"), "accepted");
    const rate = ok(o, "rate_second") as { class: string; message: string };
    assert.equal(rate.class, "RateLimitException");
    assert.match(rate.message, /rate limit exceeded: 0\.25 creates per second per tenant \(burst 1\)/);
    assert.equal((ok(o, "rate_retried") as { created: boolean }).created, true);
  });

  test("code interpreter (e2b-code-interpreter, newest): run_code state, streamed stdout, errors, PNG and HTML results, envs per run, contexts, timeout interrupts, pause/connect, async", async () => {
    const o = await run("code_interpreter.py");
    assert.equal(o.template, "code-interpreter-v1");
    assert.deepEqual(ok(o, "same_context"), [null, "2"]);
    assert.deepEqual(ok(o, "streamed"), { seen: ["one\n", "two\n"], stdout: ["one\n", "two\n"], stderr: ["oops\n"] });
    assert.deepEqual(ok(o, "error"), { name: "KeyError", value: "'nope'", has_traceback: true });
    const rich = ok(o, "rich") as { png: string; html: string; formats: string[] };
    assert.equal(rich.png, "PNG");
    assert.equal(rich.html, "<i>it</i>");
    assert.ok(rich.formats.includes("html"));
    assert.deepEqual(ok(o, "envs"), ["'v'", null]);
    assert.deepEqual(ok(o, "contexts"), {
      cwd: "/tmp",
      language: "python",
      getcwd: "'/tmp'",
      own: "7",
      listed: true,
      after_restart: "NameError",
      listed_after_remove: false,
      removed_run: "NotFoundException",
    });
    assert.deepEqual(ok(o, "timeout"), { raised: "TimeoutException", interrupted: true });
    assert.equal(ok(o, "unsupported_language"), "SandboxException");
    assert.deepEqual(ok(o, "pause_connect"), { paused: true, kept: "'py across pause'" });
    assert.deepEqual(ok(o, "async_round"), { text: "40", stdout: ["21\n"] });
  });

  test("watchdog (issue 27 item 2): a frozen envd fails the sandbox; a command errors instead of hanging, the SDK sees it gone, Native GET names the reason", async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "space-py-watchdog-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const [idFile, goFile] = [join(dir, "id"), join(dir, "go")];
    const health = await startStack({ env: { SPACE_NODE_HEALTH_INTERVAL_MS: "1000", SPACE_NODE_HEALTH_THRESHOLD: "3" } });
    t.after(() => health.stop());
    const running = run("watchdog.py", health, { WATCHDOG_ID_FILE: idFile, WATCHDOG_GO_FILE: goFile });
    const id = await Promise.race([
      waitFor(() => (existsSync(idFile) ? readFileSync(idFile, "utf8") || undefined : undefined), "the scenario's sandbox id", 180_000, 100),
      running.then((o) => Promise.reject(new Error(`watchdog.py ended before the freeze: ${JSON.stringify(o)}`))),
    ]);
    const pid = (JSON.parse(spawnSync("runc", ["--root", join(health.dataDir, "runc"), "state", id], { encoding: "utf8" }).stdout) as { pid: number }).pid;
    process.kill(pid, "SIGSTOP");
    t.after(() => void spawnSync("kill", ["-CONT", String(pid)]));
    writeFileSync(goFile, "");
    const o = await running;
    assert.equal(ok(o, "before"), "alive\n");
    assert.equal(o.frozen, true);
    const during = ok(o, "run_while_frozen") as { class: string; message: string } | string;
    assert.notEqual(during, "answered", "a command on a frozen envd does not succeed");
    assert.equal(o.run_ended_before_its_timeout, true, `the command ended with the sandbox, not at its request timeout: ${JSON.stringify(during)}`);
    assert.equal((ok(o, "get_info") as { class: string }).class, "SandboxNotFoundException", JSON.stringify(o.get_info));
    assert.equal(ok(o, "is_running"), false);
    assert.equal(ok(o, "listed"), false);
    assert.notEqual(ok(o, "connect"), "answered");
    assert.notEqual(ok(o, "run_after"), "answered");
    const native = await fetch(`${health.apiUrl}/v1/sandboxes/${id}`, { headers: { authorization: `Bearer ${health.apiKey}` } });
    const body = (await native.json()) as { state: string; reason: string | null };
    assert.equal(native.status, 200, JSON.stringify(body));
    assert.equal(body.state, "failed");
    assert.match(String(body.reason), /^unhealthy: envd did not answer/);
  });
});
