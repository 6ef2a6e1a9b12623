/**
 * The node's TemplateBuilder on a real node agent (btrfs cache, runc, network slot):
 * an OCI archive made here, RUN/COPY/ENV/WORKDIR/USER steps, the layer cache, failure
 * reporting, the envd check, and a sandbox booted from the result.
 */
import assert from "node:assert/strict";
import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { FsBlobStore } from "../../src/blob/fs/fs-blob-store.ts";
import type { BuildRecipeInput } from "../../src/contract/build-recipe.ts";
import { BuildRecipe } from "../../src/contract/build-recipe.ts";
import { isRoot, spec, startTestNode, type TestNode } from "../node/helpers.ts";
import { makeFilesTar, makeOciArchive, type OciFixture } from "./fixtures.ts";

/** Host objects of these tests (never the node tests' nor `space up`'s). */
export const TPL_SCOPE = { bridge: "spacetpl0", nftTable: "space_tpl", vethPrefix: "vp", cgroupParent: "space-tpl" };
export const TPL_CIDR = "10.203.0.0/20";

describe("template builder (node)", { skip: !isRoot && "needs root" }, () => {
  let node: TestNode;
  let oci: OciFixture;
  let blobs: FsBlobStore;

  before(async () => {
    node = await startTestNode({ env: { SPACE_NODE_SLOT_CIDR: TPL_CIDR }, deps: { hostScope: TPL_SCOPE }, realEnvd: true });
    oci = await makeOciArchive();
    blobs = new FsBlobStore(join(node.dir, "blobs"));
  });
  after(async () => {
    await node?.close();
    await oci?.cleanup();
  });

  const build = async (buildId: string, r: BuildRecipeInput) => {
    const b = node.agent.builder!;
    b.start(buildId, buildId, BuildRecipe.parse(r));
    return b.wait(buildId);
  };

  it("builds from an OCI archive with steps, caches the prefix, and boots a sandbox from it", async () => {
    const files = await makeFilesTar({ "app/hello.txt": "hello from copy\n" });
    await blobs.put("template-files/t/h1", createReadStream(files.path));
    await files.cleanup();
    const recipe: BuildRecipeInput = {
      from: { kind: "image", ref: `oci-archive:${oci.archive}` },
      steps: [
        { type: "ENV", env: { GREETING: "hi" } },
        { type: "RUN", cmd: 'echo "built $GREETING $FIXTURE" > /etc/built.txt && echo step-output' },
        { type: "WORKDIR", path: "/srv" },
        { type: "COPY", src: "app/hello.txt", dest: "./", filesHash: "h1", blobKey: "template-files/t/h1" },
        { type: "RUN", cmd: "pwd > /etc/cwd.txt && id -u > /tmp/uid", user: "root" },
      ],
      allowInternetAccess: false,
    };
    const first = await build("bld1", recipe);
    assert.equal(first.status, "ready", JSON.stringify(first.error));
    assert.ok(first.logEntries.some((e) => e.message === "step-output" && e.step === "2"));
    const root = node.agent.disks!.templatePath("bld1");
    assert.equal(await readFile(join(root, "etc/built.txt"), "utf8"), "built hi oci\n");
    assert.equal(await readFile(join(root, "srv/hello.txt"), "utf8"), "hello from copy\n");
    assert.equal(await readFile(join(root, "etc/cwd.txt"), "utf8"), "/srv\n");
    assert.equal(await readFile(join(root, "etc/layer2"), "utf8"), "from layer 2\n");
    await assert.rejects(readFile(join(root, "etc/removed-by-layer-2")), /ENOENT/, "whiteout honoured");
    assert.match(await readFile(join(root, "etc/passwd"), "utf8"), /^user:x:1000:1000:/m);
    assert.ok(first.result!.rootfsSizeMib > 0);
    assert.equal(first.result!.cachedSteps, 0);

    const second = await build("bld2", recipe);
    assert.equal(second.status, "ready", JSON.stringify(second.error));
    assert.equal(second.result!.builtSteps, 0, "an unchanged recipe is all cache hits");
    assert.equal(second.result!.digest, first.result!.digest, "the digest names the inputs (recipe, source, files), not the bytes produced");
    assert.ok(second.logEntries.some((e) => e.message.startsWith("CACHED [2/5] RUN")));

    const changed = await build("bld3", { ...recipe, steps: [...recipe.steps!.slice(0, 4), { type: "RUN", cmd: "echo other > /etc/other" }] });
    assert.equal(changed.status, "ready");
    assert.equal(changed.result!.cachedSteps, 5, "source + 4 unchanged steps from cache");
    assert.equal(changed.result!.builtSteps, 1);
    assert.notEqual(changed.result!.digest, first.result!.digest);

    // A sandbox boots from the build (real envd).
    const m = node.agent.manager!;
    const s = spec({ template: "bld1", diskMib: 512 });
    await m.create(s, AbortSignal.timeout(60_000));
    const out = await node.agent.runtime!.execIn(s.sandboxId, ["/bin/cat", "/etc/built.txt"], { timeoutMs: 10_000 });
    assert.equal(out.stdout, "built hi oci\n");
    await m.kill(s.sandboxId, AbortSignal.timeout(60_000));
  });

  it("a failing RUN names the step, the exit code and the log tail", async () => {
    const r = await build("bldfail", {
      from: { kind: "image", ref: `oci-archive:${oci.archive}` },
      steps: [{ type: "RUN", cmd: "echo before-failure; exit 7" }],
      allowInternetAccess: false,
    });
    assert.equal(r.status, "failed");
    assert.equal(r.error!.step, "1");
    assert.match(r.error!.message, /exit code 7/);
    assert.match(r.error!.message, /before-failure/);
  });

  it("the no-output watchdog stops a silent step", async () => {
    const r = await build("bldsilent", {
      from: { kind: "image", ref: `oci-archive:${oci.archive}` },
      steps: [{ type: "RUN", cmd: "sleep 30" }],
      allowInternetAccess: false,
      noOutputTimeoutMs: 1500,
    });
    assert.equal(r.status, "failed");
    assert.match(r.error!.message, /no output/);
  });

  it("builds from the base template and refuses an unknown user", async () => {
    const ok = await build("bldbase", { from: { kind: "template", name: "base" }, steps: [{ type: "RUN", cmd: "echo $(whoami) > /home/user/who", user: "user" }] });
    assert.equal(ok.status, "ready", JSON.stringify(ok.error));
    assert.equal(await readFile(join(node.agent.disks!.templatePath("bldbase"), "home/user/who"), "utf8"), "user\n");
    const bad = await build("bldbaduser", { from: { kind: "template", name: "base" }, steps: [{ type: "USER", user: "nobody-here" }] });
    assert.equal(bad.status, "failed");
    assert.match(bad.error!.message, /nobody-here/);
  });
});
