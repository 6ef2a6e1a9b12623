/** Pure logic of templates: cache keys, config carry-over, the Dockerfile subset. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { applyConfig, configFromImage, resolveWorkdir, sourceKey, stepKey, nodeTemplateName } from "../../src/contract/build-recipe.ts";
import { parseDockerfile } from "../../src/cli/template.ts";
import { parsePasswd } from "../../src/node/templates/rootfs-fs.ts";

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
