/**
 * Template distribution on a real node (btrfs cache, runc, real envd, fs blob store with
 * SPACE_ENCRYPTION_KEY): a finished build is published as an encrypted send stream; a node
 * lacking the template pulls it at create and boots it; LRU eviction reclaims space without
 * touching a template in use (template_cache_lru_eviction_reclaims); GC drops catalog
 * deletions only after the grace; prefetch takes the newest N builds; startup recovery
 * follows its decision table (template_startup_recovery_decision_table).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rm, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { openBlobStore } from "../../src/blob/open.ts";
import type { BlobStore } from "../../src/blob/blob-store.ts";
import { parseClusterKey } from "../../src/core/envelope.ts";
import { createLogger } from "../../src/core/log.ts";
import { loadConfig } from "../../src/core/config.ts";
import * as btrfs from "../../src/node/disk/btrfs.ts";
import { BuildRecipe } from "../../src/contract/build-recipe.ts";
import { TemplateCache, type TemplateCacheOptions } from "../../src/node/templates/template-cache.ts";
import { isRoot, sh, spec, startTestNode, type TestNode } from "../node/helpers.ts";
import { makeFilesTar } from "./fixtures.ts";

const KEY = randomBytes(32).toString("hex");
const MARKER = `distribution-marker-${randomBytes(6).toString("hex")}`;

describe("template distribution (node)", { skip: !isRoot && "needs root", timeout: 15 * 60_000 }, () => {
  let node: TestNode;
  let blob: BlobStore;
  const logger = createLogger("warn", "tpl-dist-test");

  before(async () => {
    node = await startTestNode({
      env: { SPACE_NODE_SLOT_CIDR: "10.203.32.0/20", SPACE_ENCRYPTION_KEY: KEY },
      deps: { hostScope: { bridge: "spacetpd0", nftTable: "space_tpd", vethPrefix: "vd", cgroupParent: "space-tpd" } },
      realEnvd: true,
    });
    blob = openBlobStore(loadConfig({}, { SPACE_DATA_DIR: node.dir }));
  });
  after(async () => {
    await blob?.close();
    await node?.close();
  });

  /** A second view of the node's cache with its own settings (the agent's runs beside it). */
  const cacheWith = (o: Partial<TemplateCacheOptions> = {}) =>
    new TemplateCache({
      disks: node.agent.disks!,
      blob,
      clusterKey: parseClusterKey(KEY),
      inUse: () => new Set(node.agent.manager!.list().map((s) => s.template)),
      targetMib: 1_000_000,
      gcIntervalMs: 3_600_000,
      graceMs: 0,
      prefetch: 5,
      scratchDir: join(node.dir, "test-pulls"),
      logger,
      ...o,
    });
  const has = (name: string) => node.agent.disks!.templateInfo(name).then(Boolean);
  /** A small published template (a few MiB of its own bytes). */
  const tiny = async (name: string, publish = true) => {
    const t = await makeFilesTar({ "data/blob.bin": randomBytes(2 * 1048576).toString("base64"), "etc/name": `${name}\n` });
    await node.agent.disks!.ensureTemplateFromTar(name, t.path, AbortSignal.timeout(60_000));
    await t.cleanup();
    if (publish) await node.agent.templates!.publish(name, AbortSignal.timeout(60_000));
  };
  const age = async (name: string, secondsAgo: number) => {
    const t = new Date(Date.now() - secondsAgo * 1000);
    await utimes(join(node.agent.disks!.cache.templatesDir, `${name}.json`), t, t);
  };
  const sig = () => AbortSignal.timeout(5 * 60_000);
  /** Eviction counts recorded rootfs sizes: fixed here so the policy, not qgroup timing, is under test. */
  const setSize = async (name: string, mib: number) => {
    const p = join(node.agent.disks!.cache.templatesDir, `${name}.json`);
    await writeFile(p, JSON.stringify({ ...JSON.parse(await readFile(p, "utf8")), rootfsSizeMib: mib }));
    node.agent.disks!.forgetTemplate(name);
  };

  it("publishes a finished build encrypted; a node lacking it pulls it at create and boots it", async () => {
    const b = node.agent.builder!;
    b.start("dist1", "dist1", BuildRecipe.parse({ from: { kind: "template", name: "base" }, steps: [{ type: "RUN", cmd: `echo ${MARKER} > /etc/marker` }] }));
    const st = await b.wait("dist1");
    assert.equal(st.status, "ready", JSON.stringify(st.error));
    assert.ok(st.logEntries.some((e) => /published to the blob store/.test(e.message)));
    const manifest = JSON.parse(await readAll(blob, "templates/builds/dist1.json")) as { stream: { key: string; wrappedKey?: string }; info: { digest: string } };
    assert.equal(manifest.stream.key, `templates/streams/${manifest.info.digest.replace("sha256:", "")}.btrfs.enc`, "content-addressed by the build digest");
    assert.ok(manifest.stream.wrappedKey, "data key wrapped by the cluster key");
    const bytes = await readAllBuf(blob, manifest.stream.key);
    assert.ok(bytes.length > 1048576);
    assert.equal(bytes.indexOf(MARKER), -1, "no plaintext in the stored stream");

    await node.agent.templates!.point("tmpl1", "dist1", sig());
    // This node forgets both: the next create must pull them from the catalog.
    await node.agent.templates!.remove("tmpl1", sig(), { catalog: false });
    await node.agent.templates!.remove("dist1", sig(), { catalog: false });
    assert.equal(await has("tmpl1"), false);

    const s = spec({ template: "tmpl1", diskMib: 1024 });
    const res = await node.agent.app.inject({ method: "POST", url: "/v1/sandboxes", headers: { authorization: "Bearer test-token" }, payload: s });
    assert.equal(res.statusCode, 201, res.body);
    assert.equal((await sh(node, s.sandboxId, "cat /etc/marker")).stdout, `${MARKER}\n`);
    assert.ok(await has("dist1"), "the alias's build came along");

    // A node without the cluster key refuses the encrypted stream (fails closed).
    await node.agent.templates!.remove("dist1", sig(), { catalog: false });
    await assert.rejects(cacheWith({ clusterKey: undefined }).ensure("dist1", sig()), /SPACE_ENCRYPTION_KEY/);
    assert.equal(await has("dist1"), false);
    await node.agent.templates!.ensure("dist1", sig());
    // The sandbox stays running: the next test's in-use template.
  });

  it("a template captured after ready: sandboxes restore its started state instead of running the start command again, also after a pull", async () => {
    const b = node.agent.builder!;
    const start = "sleep 1; head -c8 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /tmp/started.tmp && mv /tmp/started.tmp /tmp/started; sleep infinity";
    b.start("cap1", "cap1", BuildRecipe.parse({ from: { kind: "template", name: "base" }, startCmd: start, readyCmd: "test -s /tmp/started", capture: true }));
    const st = await b.wait("cap1");
    assert.equal(st.status, "ready", JSON.stringify(st.error));
    const info = (await node.agent.disks!.templateInfo("cap1")) as { capture?: { snapshotId: string } };
    assert.ok(info.capture?.snapshotId, "the capture is recorded with the template");
    const create = async () => {
      const s = spec({ template: "cap1", diskMib: 1024 });
      const res = await node.agent.app.inject({ method: "POST", url: "/v1/sandboxes", headers: { authorization: "Bearer test-token" }, payload: s });
      assert.equal(res.statusCode, 201, res.body);
      const timings = (JSON.parse(res.body) as { timings?: Record<string, number> }).timings ?? {};
      assert.ok("restoreTotalMs" in timings, `restored, not booted cold: ${JSON.stringify(timings)}`);
      const started = (await sh(node, s.sandboxId, "cat /tmp/started")).stdout;
      assert.match(started, /^[0-9a-f]{16}$/);
      assert.equal((await sh(node, s.sandboxId, "hostname")).stdout, `${s.sandboxId}\n`, "its own name, not the capture's");
      assert.ok((await sh(node, s.sandboxId, "pgrep -f 'sleep infinity'")).stdout.trim(), "the start command's process runs");
      await node.agent.manager!.kill(s.sandboxId, AbortSignal.timeout(60_000));
      return started;
    };
    const first = await create();
    assert.equal(await create(), first, "both sandboxes carry the captured state (a cold boot would draw a new value)");
    // Another node: neither the template nor the checkpoint is here; both come from the blob store.
    await node.agent.templates!.remove("cap1", sig(), { catalog: false });
    await node.agent.snapshots!.dropLocal(info.capture!.snapshotId);
    assert.equal(await create(), first);
  });

  it("template_cache_lru_eviction_reclaims: evicts least-recently-used templates to the target, never one in use", async () => {
    await tiny("lru-a");
    await tiny("lru-b");
    await tiny("lru-c");
    for (const n of ["lru-a", "lru-b", "lru-c"]) await setSize(n, 100);
    // The in-use template is the least recently used of all; then a, b, c.
    await age("tmpl1", 4000);
    await age("dist1", 4000);
    await age("lru-a", 300);
    await age("lru-b", 200);
    await age("lru-c", 100);
    const probe = cacheWith();
    const before = await probe.usage();
    const size = (n: string) => before.groups.find((g) => g.names.includes(n))!.sizeMib;
    assert.ok(before.groups.find((g) => g.names.includes("tmpl1"))!.protected, "in use");
    assert.equal(size("lru-a") + size("lru-b"), 200);
    const target = before.totalMib - 200;
    const evicted = await cacheWith({ targetMib: target }).evict(sig());
    assert.deepEqual(evicted, ["lru-a", "lru-b"]);
    for (const n of ["tmpl1", "dist1", "base", "lru-c"]) assert.ok(await has(n), `${n} kept`);
    assert.ok((await probe.usage()).totalMib <= target);
    // Evicted, not lost: the next use pulls it back.
    await node.agent.templates!.ensure("lru-a", sig());
    assert.equal(await readFile(join(node.agent.disks!.templatePath("lru-a"), "etc/name"), "utf8"), "lru-a\n");
  });

  it("GC drops a template deleted from the catalog only after the grace and never one in use", async () => {
    await tiny("gc-a");
    await blob.delete("templates/builds/gc-a.json");
    await blob.delete("templates/builds/dist1.json");
    await blob.delete("templates/aliases/tmpl1.json");
    assert.deepEqual((await cacheWith({ graceMs: 7_200_000 }).gc(sig())).dropped, [], "everything was used within the grace");
    assert.ok(await has("gc-a"), "within the grace");
    await age("gc-a", 10);
    const { dropped } = await cacheWith({ graceMs: 5_000 }).gc(sig());
    assert.ok(dropped.includes("gc-a"));
    assert.equal(await has("gc-a"), false);
    assert.ok(await has("tmpl1"), "in use: kept although deleted");
  });

  it("prefetch pulls the newest N builds of each template and points the alias at the newest", async () => {
    const names = ["pf-1", "pf-2", "pf-3", "pf-4", "pf-5", "pf-6"];
    for (const n of names) {
      await tiny(n);
      await node.agent.templates!.point("pf-tpl", n, sig());
    }
    await node.agent.templates!.remove("pf-tpl", sig(), { catalog: false });
    for (const n of names) await node.agent.templates!.remove(n, sig(), { catalog: false });
    const pulled = await cacheWith({ prefetch: 5 }).prefetch(sig());
    assert.deepEqual(pulled.filter((n) => n.startsWith("pf-")).sort(), ["pf-2", "pf-3", "pf-4", "pf-5", "pf-6"]);
    assert.equal(await has("pf-1"), false);
    assert.equal((await node.agent.disks!.templateInfo("pf-tpl"))?.source, "alias:pf-6");
  });

  it("template_startup_recovery_decision_table: keeps, finishes, re-pulls, re-points or drops each entry", async () => {
    const dir = node.agent.disks!.cache.templatesDir;
    await tiny("rc-keep");
    await tiny("rc-nometa");
    await writeFile(join(dir, "rc-nosub.json"), JSON.stringify({ name: "rc-nosub", rootfsSizeMib: 1, importedAt: "x", source: "x" }));
    await btrfs.subvolumeCreate(join(dir, "rc-writable"));
    await writeFile(join(dir, "rc-writable.json"), JSON.stringify({ name: "rc-writable", rootfsSizeMib: 1, importedAt: "x", source: "x" }));
    await tiny("rc-deleted");
    await tiny("rc-deleted-used");
    await tiny("rc-local", false);
    await tiny("rc-b1");
    await tiny("rc-b2");
    await node.agent.templates!.point("rc-alias", "rc-b1", sig());
    await blob.put("templates/aliases/rc-alias.json", Buffer.from(JSON.stringify({ alias: "rc-alias", builds: ["rc-b2", "rc-b1"], updatedAt: new Date().toISOString() })));
    await mkdir(join(dir, ".pull-rc-partial"));
    await btrfs.subvolumeCreate(join(dir, ".pull-rc-partial", "half"));
    await btrfs.subvolumeCreate(join(dir, ".import-rc-x-1"));
    await rm(join(dir, "rc-nometa.json"));
    await blob.delete("templates/builds/rc-deleted.json");
    await blob.delete("templates/builds/rc-deleted-used.json");
    node.agent.disks!.forgetTemplate("rc-nometa");

    const rc = cacheWith({ inUse: () => new Set(["rc-deleted-used", "tmpl1"]) });
    const decisions = await rc.recover(sig());
    const by = Object.fromEntries(decisions.map((d) => [d.name, `${d.state}/${d.catalog}/${d.action}`]));
    assert.equal(by["rc-keep"], "complete/present/keep");
    assert.equal(by["rc-nometa"], "no-metadata/present/repull");
    assert.equal(by["rc-nosub"], "no-subvolume/never/drop");
    assert.equal(by["rc-writable"], "writable/never/drop");
    assert.equal(by["rc-deleted"], "complete/deleted/drop");
    assert.equal(by["rc-deleted-used"], "complete/deleted/keep");
    assert.equal(by["rc-local"], "complete/never/publish");
    assert.equal(by["rc-alias"], "complete/differs/repoint");
    assert.equal(by["base"], "complete/never/keep");
    assert.equal(by[".pull-rc-partial"], "partial-pull/unknown/drop");
    assert.equal(by[".import-rc-x-1"], "work-leftover/unknown/drop");

    for (const n of ["rc-keep", "rc-nometa", "rc-deleted-used", "rc-local", "rc-alias", "base"]) assert.ok(await has(n), `${n} present after recovery`);
    for (const n of ["rc-nosub", "rc-writable", "rc-deleted"]) assert.equal(await has(n), false, `${n} gone`);
    const left = await readdir(dir);
    for (const n of ["rc-nosub.json", "rc-writable", "rc-writable.json", "rc-deleted", ".pull-rc-partial", ".import-rc-x-1"]) assert.ok(!left.includes(n), `${n} removed`);
    assert.ok(await blob.head("templates/builds/rc-local.json"), "the unpublished build was published");
    assert.equal((await node.agent.disks!.templateInfo("rc-alias"))?.source, "alias:rc-b2");
    // A second pass over a recovered cache changes nothing.
    const again = await rc.recover(sig());
    assert.deepEqual(again.filter((d) => d.action !== "keep").map((d) => d.name), []);
  });
});

async function readAllBuf(blob: BlobStore, key: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of await blob.get(key)) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}
async function readAll(blob: BlobStore, key: string): Promise<string> {
  return (await readAllBuf(blob, key)).toString("utf8");
}
