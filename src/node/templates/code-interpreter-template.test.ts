import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { templateBoot } from "../sandboxes/template-boot.ts";
import { codeInterpreterBoot, codeInterpreterDigest, findCodeInterpreterTarball, CODE_INTERPRETER_TEMPLATE } from "./code-interpreter-template.ts";

test("an imported code-interpreter-v1 boots its server and waits for its health check", () => {
  const boot = templateBoot({ name: CODE_INTERPRETER_TEMPLATE, rootfsSizeMib: 1, importedAt: "", source: "", ...codeInterpreterBoot() });
  assert.match(boot.startCmd ?? "", /python3 \/opt\/space\/code-interpreter\/server\.py$/);
  assert.equal(boot.readyCmd, "curl -sf http://127.0.0.1:49999/health");
});

test("the tarball is found only beside its metadata, under the current recipe's digest", async () => {
  const dir = await mkdtemp(join(tmpdir(), "ci-tar-"));
  try {
    assert.equal(await findCodeInterpreterTarball(dir), undefined);
    const stem = join(dir, `${CODE_INTERPRETER_TEMPLATE}-${(await codeInterpreterDigest()).slice(0, 12)}`);
    await writeFile(`${stem}.json`, JSON.stringify({ name: CODE_INTERPRETER_TEMPLATE, tarPath: "/elsewhere.tar", rootfsSizeMib: 859 }));
    assert.equal(await findCodeInterpreterTarball(dir), undefined, "metadata without its tarball");
    await writeFile(`${stem}.tar`, "");
    const found = await findCodeInterpreterTarball(dir);
    assert.equal(found?.tarPath, `${stem}.tar`);
    assert.equal(found?.rootfsSizeMib, 859);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
