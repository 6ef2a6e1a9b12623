/** Pure logic of templates: cache keys, config carry-over, the Dockerfile subset. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { applyConfig, configFromImage, resolveWorkdir, sourceKey, stepKey, nodeTemplateName } from "../../src/contract/build-recipe.ts";
import { parseDockerfile } from "../../src/cli/template.ts";
import { parsePasswd } from "../../src/node/templates/rootfs-fs.ts";
import { copySourceRoot } from "../../src/node/templates/builder.ts";
import { parseNameTag, validateTag } from "../../src/templates/build-coordinator.ts";
import { newBuildId } from "../../src/store/templates.ts";
import { parseBuildTarget } from "../../src/operations/requests.ts";
import { SpaceError } from "../../src/core/errors.ts";

describe("recipe", () => {
  const src = sourceKey("image:sha256:abc");
  it("step keys depend on the parent and the inputs, not on force or the blob key", () => {
    const run = { type: "RUN", cmd: "echo hi" } as const;
    assert.equal(stepKey(src, run), stepKey(src, { ...run, force: true }));
    assert.notEqual(stepKey(src, run), stepKey(sourceKey("image:sha256:other"), run));
    assert.notEqual(stepKey(src, run), stepKey(src, { ...run, user: "user" }));
    const copy = { type: "COPY", src: "a", dest: "/b", filesHash: "h1", blobKey: "k1" } as const;
    assert.equal(stepKey(src, copy), stepKey(src, { ...copy, blobKey: "k2" }));
    assert.notEqual(stepKey(src, copy), stepKey(src, { ...copy, filesHash: "h2" }));
    assert.equal(stepKey(src, { type: "ENV", env: { A: "1", B: "2" } }), stepKey(src, { type: "ENV", env: { B: "2", A: "1" } }));
  });
  it("config: ENV expands, WORKDIR resolves, USER sets", () => {
    let c = configFromImage({ Env: ["PATH=/bin", "X=1"], WorkingDir: "", User: "" });
    assert.deepEqual(c, { env: { PATH: "/bin", X: "1" }, workdir: "/", user: "root" });
    c = applyConfig(c, { type: "ENV", env: { PATH: "/opt/bin:$PATH", Y: "${X}2" } });
    assert.deepEqual(c.env, { PATH: "/opt/bin:/bin", X: "1", Y: "12" });
    c = applyConfig(c, { type: "WORKDIR", path: "/srv" });
    c = applyConfig(c, { type: "WORKDIR", path: "app/../web" });
    assert.equal(c.workdir, "/srv/web");
    assert.equal(applyConfig(c, { type: "USER", user: "user" }).user, "user");
    assert.equal(resolveWorkdir("/a", "/"), "/");
    assert.equal(nodeTemplateName("bd_AbC1"), "bd-abc1");
  });
  it("parses /etc/passwd", () => {
    assert.deepEqual(parsePasswd("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n")[1], { name: "user", uid: 1000, gid: 1000, home: "/home/user" });
  });
});

describe("E2B names, tags, build ids and COPY sources", () => {
  const invalid = (re: RegExp) => (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && re.test(e.message);
  it("name[:tag] splits at the first ':' and refuses an empty or bad part, naming the value", () => {
    assert.deepEqual(parseNameTag("web"), { alias: "web", tag: undefined });
    assert.deepEqual(parseNameTag("web:v1.2"), { alias: "web", tag: "v1.2" });
    assert.throws(() => parseNameTag(":x"), invalid(/name ":x"/));
    assert.throws(() => parseNameTag("name:"), invalid(/name "name:": tag "" is not valid/));
    assert.throws(() => parseNameTag("a:b:c", "target"), invalid(/target "a:b:c"/));
    assert.throws(() => validateTag("Prod"), invalid(/"Prod"/));
    assert.throws(() => validateTag("0b0e4c1e-1d7b-4a36-9d7e-6a1d2f8c9e10"), invalid(/UUID/));
  });
  it("build ids are UUIDs; operation targets take them and the older bd_ ids", () => {
    const id = newBuildId();
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(parseBuildTarget(`builds/${id}`), id);
    assert.equal(parseBuildTarget("builds/bd_abc"), "bd_abc");
    assert.equal(nodeTemplateName(id), id);
  });
  it("a COPY source names the path before its first glob segment, as E2B's builder takes it", () => {
    assert.equal(copySourceRoot("folder/*"), "folder");
    assert.equal(copySourceRoot("folder/*.txt"), "folder");
    assert.equal(copySourceRoot("./a/b/**/*.js"), "a/b");
    assert.equal(copySourceRoot("*.txt"), "");
    assert.equal(copySourceRoot("src/{a,b}.ts"), "src");
    assert.equal(copySourceRoot("folder/"), "folder");
    assert.equal(copySourceRoot("a/file.txt"), "a/file.txt");
    assert.equal(copySourceRoot("."), "");
    assert.equal(copySourceRoot("lit\\*/x"), "lit*/x");
    assert.throws(() => copySourceRoot("../etc/*"), invalid(/inside the build context/));
  });
});

describe("Dockerfile subset", () => {
  it("maps instructions to E2B steps", () => {
    const df = parseDockerfile(
      [
        "# a comment",
        "FROM oci-archive:img.tar",
        "ENV A=1 B=\"two words\"",
        "ENV C 3",
        "RUN apt-get update && \\",
        "    echo done",
        "COPY --chown=user --chmod=0755 a.sh b.txt /app/",
        "WORKDIR /app",
        "USER user",
        'CMD ["python3", "-m", "http.server"]',
        "# space:ready curl -s localhost:8000",
      ].join("\n"),
      "/ctx",
    );
    assert.deepEqual(df.from, { fromImage: "oci-archive:/ctx/img.tar" });
    assert.deepEqual(df.steps, [
      { type: "ENV", args: ["A", "1", "B", "two words"] },
      { type: "ENV", args: ["C", "3"] },
      { type: "RUN", args: ["apt-get update &&      echo done"] },
      { type: "COPY", args: ["a.sh", "/app/", "user", "0755"] },
      { type: "COPY", args: ["b.txt", "/app/", "user", "0755"] },
      { type: "WORKDIR", args: ["/app"] },
      { type: "USER", args: ["user"] },
    ]);
    assert.equal(df.startCmd, "python3 -m http.server");
    assert.equal(df.readyCmd, "curl -s localhost:8000");
    assert.equal(df.capture, undefined);
    assert.equal(parseDockerfile('FROM base\nCMD ["srv"]\n# space:capture\n', "/x").capture, true);
    assert.deepEqual(parseDockerfile("FROM base\n", "/x").from, { fromTemplate: "base" });
    assert.throws(() => parseDockerfile("FROM base\nHEALTHCHECK x\n", "/x"), /unsupported instruction/);
  });
});
