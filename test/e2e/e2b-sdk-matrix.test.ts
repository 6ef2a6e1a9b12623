/**
 * Issue 20's behaviours through each older JS SDK's own code path, against one real stack:
 * 1.13.2 (`e2b-1`), 2.0.3 (`e2b-20`), 2.50.0 (`e2b-250`). The latest (2.51) asserts them
 * in their own files (e2b-files, pause-filesystem, sandbox-logs, templates-compat) and runs
 * here only the rows those do not (dangling symlinks, background/connect/watch deadlines);
 * each row is one behaviour × one SDK, run through that SDK's methods so its own wire
 * (paths, bodies, parsing) meets SPACE's answer. A row is skipped, with the reason, only
 * where that SDK has no API for the behaviour (read in its dist/index.mjs).
 *
 * Wire differences that matter: 1.x and 2.0 have no apiUrl/sandboxUrl (fetch is rewritten
 * to the stack, as in ecw-old-sdks.test.ts); 1.x creates on `POST /sandboxes` with
 * `autoPause: false` always; 2.0's `betaCreate({ autoPause })` and `betaPause()` send no
 * `memory`, and its connect sets the timeout, resuming only on a 404; 1.x and 2.0 declare
 * `getMetrics({ start, end })` but put them in path parameters, so no range is sent; 2.50
 * creates on `POST /sandboxes` (`secure: true`), connects on `POST /sandboxes/{id}/connect`
 * and sends `pause` `{memory: true}` by default (2.51 sends nothing). Needs root.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import * as e2b from "e2b";
import * as e2b1 from "e2b-1";
import * as e2b20 from "e2b-20";
import * as e2b250 from "e2b-250";
import { counterScript } from "../support/counter.ts";
import { waitFor, type Stack } from "../support/stack.ts";
import { startStackBehindFront } from "../support/wildcard-front.ts";

const skip = process.getuid?.() !== 0 ? "needs root (runc, CRIU, network namespaces, btrfs)" : false;
const DOMAIN = "space.test";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const COUNTER = counterScript("mxcounter");
/** Processes whose command line names the counter script (the bracket keeps the grep itself out). */
const COUNT_COUNTERS = "grep -l 'mxcount[e]r.py' /proc/[0-9]*/cmdline 2>/dev/null | wc -l";

/** What every SDK version's sandbox offers, as the rows below use it. */
interface AnySandbox {
  sandboxId: string;
  kill(): Promise<unknown>;
  commands: {
    run(cmd: string, opts?: { timeoutMs?: number }): Promise<{ stdout: string }>;
    run(cmd: string, opts: { background: true; timeoutMs?: number }): Promise<{ pid: number; wait(): Promise<unknown> }>;
    connect(pid: number, opts?: { timeoutMs?: number }): Promise<{ wait(): Promise<unknown> }>;
    list(): Promise<{ pid: number; args: string[] }[]>;
  };
  files: {
    write(path: string, data: string): Promise<unknown>;
    read(path: string): Promise<string>;
    exists(path: string): Promise<boolean>;
    remove(path: string): Promise<void>;
    makeDir(path: string): Promise<boolean>;
    getInfo(path: string): Promise<{ type?: string; size: number; mode: number; symlinkTarget?: string }>;
    list(path: string): Promise<{ name: string; type?: string; size: number; symlinkTarget?: string }[]>;
    watchDir(
      path: string,
      onEvent: () => void,
      opts?: { timeoutMs?: number; onExit?: (err?: Error) => void },
    ): Promise<{ stop(): Promise<void> }>;
  };
  getMetrics(opts?: { start?: Date; end?: Date }): Promise<{ timestamp: Date }[]>;
}

type SdkName = "1.13.2" | "2.0.3" | "2.50.0" | "2.51.0";
type Row =
  | "clears"
  | "remove"
  | "symlink"
  | "dangling"
  | "dir-size"
  | "run-deadline"
  | "background-deadline"
  | "connect-deadline"
  | "watch-deadline"
  | "metrics"
  | "metadata";
interface Sdk {
  name: SdkName;
  create(): Promise<AnySandbox>;
  TimeoutError: abstract new (...args: never[]) => Error;
  /** The rows it runs (absent: all): 2.51 asserts the others in its own files. */
  only?: Row[];
}

describe(
  "issue 20 behaviours through each e2b JS SDK version (1.13.2, 2.0.3, 2.50.0; 2.51.0 where its own files do not assert)",
  { skip, timeout: 30 * 60_000 },
  () => {
    let stack: Stack;
    let restoreFetch = (): void => {};
    const created: { kill(): Promise<unknown> }[] = [];
    /** Options for 1.x and 2.0 (no apiUrl/sandboxUrl: the domain, reached through the rewritten fetch). */
    const oldOpts = () => ({ apiKey: stack.apiKey, domain: DOMAIN, requestTimeoutMs: 120_000 });
    /** Options for 2.50. */
    const opts250 = () => ({
      apiKey: stack.apiKey,
      apiUrl: stack.apiUrl,
      sandboxUrl: stack.sandboxUrl,
      requestTimeoutMs: 300_000,
    });
    const keep = <S extends { kill(): Promise<unknown> }>(sb: S): S => {
      created.push(sb);
      return sb;
    };

    const sdks: Sdk[] = [
      {
        name: "1.13.2",
        create: async () => keep(await e2b1.Sandbox.create("base", { ...oldOpts(), timeoutMs: 600_000 })),
        TimeoutError: e2b1.TimeoutError,
      },
      {
        name: "2.0.3",
        create: async () => keep(await e2b20.Sandbox.create("base", { ...oldOpts(), timeoutMs: 600_000 })),
        TimeoutError: e2b20.TimeoutError,
      },
      {
        name: "2.50.0",
        create: async () => keep(await e2b250.Sandbox.create("base", { ...opts250(), timeoutMs: 600_000 })),
        TimeoutError: e2b250.TimeoutError,
      },
      {
        name: "2.51.0",
        create: async () => keep(await e2b.Sandbox.create("base", { ...opts250(), timeoutMs: 600_000 })),
        TimeoutError: e2b.TimeoutError,
        only: ["dangling", "background-deadline", "connect-deadline", "watch-deadline"],
      },
    ];
    /** One sandbox per SDK for the file and command rows. */
    const shared = new Map<SdkName, Promise<AnySandbox>>();
    const sandboxOf = (sdk: Sdk) => {
      if (!shared.has(sdk.name)) shared.set(sdk.name, sdk.create());
      return shared.get(sdk.name)!;
    };

    before(async () => {
      ({ stack, restoreFetch } = await startStackBehindFront(DOMAIN));
    });
    after(async () => {
      await Promise.allSettled(created.map((s) => s.kill()));
      restoreFetch();
      await stack?.stop();
    });

    /** The `user.e2b.*` xattrs of a file, read inside the sandbox: `[[name, value]]` sorted. */
    const xattrsOf = async (sb: AnySandbox, path: string): Promise<[string, string][]> => {
      const code = `import os, json; print(json.dumps(sorted([n, os.getxattr('${path}', n).decode()] for n in os.listxattr('${path}') if n.startswith('user.e2b.'))))`;
      return JSON.parse((await sb.commands.run(`python3 -c "${code}"`)).stdout) as [string, string][];
    };
    /** A counter running in the background, and a marker file on the disk. */
    const prepare = async (sb: AnySandbox, marker: string) => {
      await sb.files.write("/home/user/note.txt", marker);
      await sb.files.write(COUNTER.path, COUNTER.source);
      await sb.commands.run(COUNTER.start);
      await waitFor(
        async () => (await sb.commands.run(COUNT_COUNTERS)).stdout.trim() === "1" || undefined,
        "the counter runs",
        30_000,
      );
    };
    /** After a connect: reachable (issue 20 item 1 is its own package), the disk kept; how many counters run. */
    const afterConnect = async (sb: AnySandbox, marker: string) => {
      await waitFor(() => sb.files.exists("/home/user/note.txt"), "the sandbox is reachable after connect", 30_000);
      assert.equal(await sb.files.read("/home/user/note.txt"), marker, "the disk is kept");
      return (await sb.commands.run(COUNT_COUNTERS)).stdout.trim();
    };

    // ---- files and commands (items 4, 5, 8): every SDK has these methods ----

    for (const sdk of sdks) {
      // Node capacity is shared with the pause rows: each SDK's sandbox goes when its rows are done.
      describe(sdk.name, () => {
        const runs = (row: Row) => !sdk.only || sdk.only.includes(row);
        after(async () => {
          await (await shared.get(sdk.name))?.kill();
        });
        if (runs("clears"))
          test(`${sdk.name}: an upload without X-Metadata-* clears user.e2b.* xattrs set in the sandbox; the write answer parses`, async () => {
            const sb = await sandboxOf(sdk);
            const path = "/home/user/mx/meta.txt";
            await sb.commands.run(
              `mkdir -p /home/user/mx && echo x > ${path} && python3 -c "import os; os.setxattr('${path}', 'user.e2b.k', b'v')"`,
            );
            assert.deepEqual(await xattrsOf(sb, path), [["user.e2b.k", "v"]]);
            const w = (await sb.files.write(path, "plain")) as { path: string; name: string };
            assert.deepEqual([w.path, w.name], [path, "meta.txt"]);
            assert.deepEqual(await xattrsOf(sb, path), [], "the upload replaced the metadata with none");
            assert.equal(await sb.files.read(path), "plain");
          });

        if (runs("remove"))
          test(`${sdk.name}: remove of a missing path succeeds`, async () => {
            const sb = await sandboxOf(sdk);
            await sb.files.remove("/home/user/mx/never-existed.txt");
            await sb.files.remove("/home/user/mx/never/existed/either");
            assert.equal(await sb.files.exists("/home/user/mx/never-existed.txt"), false);
          });

        if (runs("symlink"))
          test(`${sdk.name}: getInfo and list of a symlink report the target's type with symlinkTarget`, async () => {
            const sb = await sandboxOf(sdk);
            await sb.commands.run(
              "mkdir -p /home/user/mxln/dir && echo hi > /home/user/mxln/file && chmod 640 /home/user/mxln/file && ln -sf /home/user/mxln/file /home/user/mxln/to-file && ln -sfn dir /home/user/mxln/to-dir",
            );
            const f = await sb.files.getInfo("/home/user/mxln/to-file");
            assert.deepEqual([f.type, f.symlinkTarget, f.mode], ["file", "/home/user/mxln/file", 0o640]);
            const d = await sb.files.getInfo("/home/user/mxln/to-dir");
            assert.deepEqual([d.type, d.symlinkTarget], ["dir", "/home/user/mxln/dir"]);
            const listed = await sb.files.list("/home/user/mxln");
            assert.deepEqual(
              listed.map((e) => [e.name, e.type, e.symlinkTarget]),
              [
                ["dir", "dir", undefined],
                ["file", "file", undefined],
                ["to-dir", "dir", "/home/user/mxln/dir"],
                ["to-file", "file", "/home/user/mxln/file"],
              ],
            );
          });

        if (runs("dangling"))
          test(`${sdk.name}: a directory holding a dangling symlink lists (the SDK's own proto decides what it shows)`, async () => {
            const sb = await sandboxOf(sdk);
            await sb.commands.run(
              "mkdir -p /home/user/mxdl && echo x > /home/user/mxdl/file && ln -sfn /home/user/mxdl/gone /home/user/mxdl/dangling",
            );
            const listed = (await sb.files.list("/home/user/mxdl")).map((e) => [e.name, e.type]);
            // 1.x and 2.0 have no FILE_TYPE_SYMLINK in their proto: the enum is dropped (unknown JSON enum ignored), and so is the entry.
            assert.deepEqual(
              listed,
              sdk.name === "2.50.0" || sdk.name === "2.51.0"
                ? [
                    ["dangling", "symlink"],
                    ["file", "file"],
                  ]
                : [["file", "file"]],
            );
          });

        if (runs("dir-size"))
          test(`${sdk.name}: a directory's size is a whole 4096-byte block, never 0`, async () => {
            const sb = await sandboxOf(sdk);
            await sb.files.makeDir("/home/user/mx/empty-dir");
            assert.equal((await sb.files.getInfo("/home/user/mx/empty-dir")).size, 4096);
            assert.equal((await sb.files.list("/home/user/mx")).find((e) => e.name === "empty-dir")?.size, 4096);
          });

        if (runs("run-deadline"))
          test(`${sdk.name}: commands.run past its timeoutMs rejects with the SDK's TimeoutError and the command is killed`, async () => {
            const sb = await sandboxOf(sdk);
            const err = await sb.commands.run("sleep 32", { timeoutMs: 2000 }).then(
              () => undefined,
              (e: unknown) => e,
            );
            assert.ok(err instanceof sdk.TimeoutError, `expected ${sdk.name}'s TimeoutError, got ${String(err)}`);
            await waitFor(
              async () => !(await sb.commands.list()).some((p) => p.args.includes("sleep 32")),
              "sleep 32 killed at its deadline",
            );
          });

        if (runs("background-deadline"))
          test(`${sdk.name}: a background command past its timeoutMs: wait() rejects with TimeoutError and the command is killed`, async () => {
            const sb = await sandboxOf(sdk);
            const h = await sb.commands.run("sleep 33", { background: true, timeoutMs: 2000 });
            const err = await h.wait().then(
              () => undefined,
              (e: unknown) => e,
            );
            assert.ok(err instanceof sdk.TimeoutError, `expected ${sdk.name}'s TimeoutError, got ${String(err)}`);
            await waitFor(
              async () => !(await sb.commands.list()).some((p) => p.args.includes("sleep 33")),
              "sleep 33 killed at its deadline",
            );
          });

        if (runs("connect-deadline"))
          test(`${sdk.name}: commands.connect past its timeoutMs: wait() rejects with TimeoutError and the command keeps running`, async () => {
            const sb = await sandboxOf(sdk);
            const h = await sb.commands.run("sleep 34", { background: true, timeoutMs: 0 });
            const again = await sb.commands.connect(h.pid, { timeoutMs: 2000 });
            const err = await again.wait().then(
              () => undefined,
              (e: unknown) => e,
            );
            assert.ok(err instanceof sdk.TimeoutError, `expected ${sdk.name}'s TimeoutError, got ${String(err)}`);
            assert.ok(
              (await sb.commands.list()).some((p) => p.pid === h.pid),
              "a connect's deadline leaves the command running",
            );
            await sb.commands.run(`kill ${h.pid}`);
          });

        if (runs("watch-deadline"))
          test(`${sdk.name}: watchDir past its timeoutMs ends through onExit with TimeoutError`, async () => {
            const sb = await sandboxOf(sdk);
            await sb.files.makeDir("/home/user/mxw");
            const exited = new Promise<Error | undefined>((res) => {
              void sb.files.watchDir("/home/user/mxw", () => {}, { timeoutMs: 2000, onExit: res });
            });
            const err = await exited;
            assert.ok(err instanceof sdk.TimeoutError, `expected ${sdk.name}'s TimeoutError, got ${String(err)}`);
          });

        if (runs("metrics"))
          test(`${sdk.name}: getMetrics returns the sampled history (more than one sample, oldest first)`, async () => {
            const sb = await sandboxOf(sdk);
            // 1.x and 2.0 never send a range (path parameters): the answer is every sample kept.
            const range =
              sdk.name === "2.50.0" ? { start: new Date(Date.now() - 3_600_000), end: new Date(Date.now() + 3_600_000) } : {};
            const samples = await waitFor(
              async () => {
                const m = await sb.getMetrics(range);
                return m.length >= 2 ? m : null;
              },
              "two metrics samples",
              60_000,
              1000,
            );
            const times = samples.map((m) => m.timestamp.getTime());
            assert.ok(
              times.every((t, i) => i === 0 || t > times[i - 1]!),
              `increasing: ${times.join(",")}`,
            );
          });

        if (runs("metadata"))
          test(
            `${sdk.name}: files.write({ metadata }): the answer and getInfo carry it, xattrs hold it`,
            {
              skip:
                sdk.name === "2.50.0"
                  ? false
                  : "no API: files.write takes no metadata option and getInfo/list map no metadata field (dist/index.mjs Filesystem)",
            },
            async () => {
              const sb = await sandboxOf(sdk);
              const s = sb as unknown as e2b250.Sandbox;
              const path = "/home/user/mx/with-meta.txt";
              const w = await s.files.write(path, "m", { metadata: { Owner: "js250" } });
              assert.deepEqual(w.metadata, { owner: "js250" });
              assert.deepEqual((await s.files.getInfo(path)).metadata, { owner: "js250" });
              assert.deepEqual(await xattrsOf(sb, path), [["user.e2b.owner", "js250"]]);
              await sb.commands.run(`python3 -c "import os; os.setxattr('${path}', 'user.e2b.inside', b'yes')"`);
              assert.deepEqual((await s.files.getInfo(path)).metadata, { owner: "js250", inside: "yes" });
            },
          );
      });
    }

    // ---- pause and lifecycle (item 3) ----

    test("1.13.2: pause, autoPause", { skip: "no API: 1.13.2 has no pause method and always sends autoPause: false" }, () => {});
    test(
      "2.0.3: pause({ keepMemory: false }), connect({ onResume })",
      {
        skip: "no API: betaPause() takes no keepMemory (sends no body: a full pause, ecw-old-sdks.test.ts), connect() has no onResume",
      },
      () => {},
    );

    test("2.0.3: betaCreate({ autoPause: true }): the timeout pauses with memory; connect (timeout → 404 → resume) resumes it, the process survives", async () => {
      const marker = `mx20-${randomBytes(4).toString("hex")}`;
      const sb = keep(await e2b20.Sandbox.betaCreate("base", { ...oldOpts(), autoPause: true, timeoutMs: 20_000 }));
      await prepare(sb, marker);
      await waitFor(
        async () => (await e2b20.Sandbox.getInfo(sb.sandboxId, oldOpts())).state === "paused" || undefined,
        "the timeout pauses it",
        120_000,
        500,
      );
      const back = keep(await e2b20.Sandbox.connect(sb.sandboxId, { ...oldOpts(), timeoutMs: 600_000 }));
      assert.equal(await afterConnect(back, marker), "1", "a memory pause keeps the process");
      await back.kill();
    });

    test("2.0.3: connect to a sandbox paused filesystem-only by another client (timeout → 404 → POST /resume) boots it fresh", async () => {
      const marker = `mx20fs-${randomBytes(4).toString("hex")}`;
      const sb = keep(await e2b20.Sandbox.create("base", { ...oldOpts(), timeoutMs: 600_000 }));
      await prepare(sb, marker);
      assert.equal(await e2b250.Sandbox.pause(sb.sandboxId, { ...opts250(), keepMemory: false }), true);
      const back = keep(await e2b20.Sandbox.connect(sb.sandboxId, { ...oldOpts(), timeoutMs: 600_000 }));
      assert.equal(await afterConnect(back, marker), "0", "no process survived: it booted fresh");
      await back.kill();
    });

    test("2.50.0: pause({ keepMemory: false }) (body {memory: false}) → connect (v1 /connect) boots fresh from the disk", async () => {
      const marker = `mx250-${randomBytes(4).toString("hex")}`;
      const sb = keep(await e2b250.Sandbox.create("base", { ...opts250(), timeoutMs: 600_000 }));
      await prepare(sb, marker);
      assert.equal(await sb.pause({ keepMemory: false }), true);
      assert.equal((await e2b250.Sandbox.getInfo(sb.sandboxId, opts250())).state, "paused");
      assert.equal(await e2b250.Sandbox.pause(sb.sandboxId, { ...opts250(), keepMemory: false }), false, "already paused: 409");
      const back = keep(await e2b250.Sandbox.connect(sb.sandboxId, { ...opts250(), timeoutMs: 600_000 }));
      assert.equal(await afterConnect(back, marker), "0", "no process survived: it booted fresh");
      assert.ok(!(await back.commands.list()).some((p) => p.args.some((a) => a.includes("mxcounter"))), "envd is fresh");
      await back.kill();
    });

    test("2.50.0: pause() (body {memory: true}) keeps the process; connect({ onResume: 'reboot' }) after it boots fresh", async () => {
      const marker = `mx250r-${randomBytes(4).toString("hex")}`;
      const sb = keep(await e2b250.Sandbox.create("base", { ...opts250(), timeoutMs: 600_000 }));
      await prepare(sb, marker);
      assert.equal(await sb.pause(), true);
      const full = keep(await e2b250.Sandbox.connect(sb.sandboxId, { ...opts250(), timeoutMs: 600_000 }));
      assert.equal(await afterConnect(full, marker), "1", "a full pause keeps the process");
      assert.equal(await full.pause(), true);
      const rebooted = keep(await e2b250.Sandbox.connect(sb.sandboxId, { ...opts250(), timeoutMs: 600_000, onResume: "reboot" }));
      assert.equal(await afterConnect(rebooted, marker), "0", "onResume 'reboot' boots fresh");
      await rebooted.kill();
    });

    test("2.50.0: lifecycle.onTimeout { action: 'pause', keepMemory: false } (v1 create, autoPauseMemory: false): the timeout pauses filesystem-only", async () => {
      const marker = `mx250t-${randomBytes(4).toString("hex")}`;
      const sb = keep(
        await e2b250.Sandbox.create("base", {
          ...opts250(),
          timeoutMs: 20_000,
          lifecycle: { onTimeout: { action: "pause", keepMemory: false } },
        }),
      );
      await prepare(sb, marker);
      await waitFor(
        async () => (await e2b250.Sandbox.getInfo(sb.sandboxId, opts250())).state === "paused" || undefined,
        "the timeout pauses it",
        120_000,
        500,
      );
      const back = keep(await e2b250.Sandbox.connect(sb.sandboxId, { ...opts250(), timeoutMs: 600_000 }));
      assert.equal(await afterConnect(back, marker), "0", "no process survived: it booted fresh");
      await back.kill();
    });

    // ---- list (item 6), templates (item 7) ----

    test(
      "1.13.2, 2.0.3: list startedAfter",
      { skip: "no API: the list query takes no startedAfter (1.13.2: metadata only; 2.0.3: metadata and state)" },
      () => {},
    );

    test("2.50.0: Sandbox.list({ startedAfter }) is at or after", async () => {
      const tag = randomBytes(6).toString("hex");
      const sb = keep(await e2b250.Sandbox.create("base", { ...opts250(), metadata: { tag } }));
      const { startedAt } = await sb.getInfo();
      const at = await e2b250.Sandbox.list({ ...opts250(), query: { metadata: { tag }, startedAfter: startedAt } }).nextItems();
      assert.deepEqual(
        at.map((x) => x.sandboxId),
        [sb.sandboxId],
        "startedAfter = startedAt lists it",
      );
      const later = await e2b250.Sandbox.list({
        ...opts250(),
        query: { metadata: { tag }, startedAfter: new Date(startedAt.getTime() + 1) },
      }).nextItems();
      assert.deepEqual(later, []);
      await sb.kill();
    });

    test(
      "1.13.2, 2.0.3: Template.exists, tags",
      { skip: "no API: neither exports a Template class (template builds came with the 2.x Template SDK)" },
      () => {},
    );

    test("2.50.0: Template.exists('base'); a build's id is a UUID and its tags parse", async () => {
      const o = opts250();
      assert.equal(await e2b250.Template.exists("base", o), true);
      assert.equal(await e2b250.Template.exists("no-such-template-mx", o), false);
      const info = await e2b250.Template.build(e2b250.Template().fromTemplate("base").runCmd("true"), "mx-tpl:v1", o);
      assert.match(info.buildId, UUID);
      const assigned = await e2b250.Template.assignTags("mx-tpl:v1", "prod", o);
      assert.equal(assigned.buildId, info.buildId);
      const tags = await e2b250.Template.getTags(info.templateId, o);
      assert.deepEqual(tags.map((t) => t.tag).sort(), ["default", "prod", "v1"]);
      await assert.rejects(e2b250.Template.assignTags("name:", "prod", o), /"name:"/);
    });
  },
);
