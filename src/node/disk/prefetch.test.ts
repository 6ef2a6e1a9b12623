import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { HOT_FILES, prefetch } from "./prefetch.ts";

describe("prefetch", () => {
  const dirs: string[] = [];
  after(async () => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));
  const rootfs = async () => {
    const d = await mkdtemp(join(tmpdir(), "space-prefetch-"));
    dirs.push(d);
    return d;
  };

  it("reads the files through relative symlinks, each once (merged /usr)", async () => {
    const root = await rootfs();
    await mkdir(join(root, "usr/lib/x86_64-linux-gnu"), { recursive: true });
    await mkdir(join(root, "usr/bin"), { recursive: true });
    await mkdir(join(root, "etc"));
    await symlink("usr/lib", join(root, "lib"));
    await writeFile(join(root, "usr/lib/x86_64-linux-gnu/libc.so.6"), "libc");
    await writeFile(join(root, "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"), "libstdc++");
    await symlink("libstdc++.so.6.0.30", join(root, "usr/lib/x86_64-linux-gnu/libstdc++.so.6"));
    await writeFile(join(root, "usr/bin/bash"), "bash");
    await writeFile(join(root, "etc/profile"), "profile");
    const read = await prefetch(root, ["usr/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libstdc++.so.6", "usr/bin/bash", "bin/bash", "etc/profile", "etc/missing"]);
    assert.deepEqual(read.sort(), ["etc/profile", "usr/bin/bash", "usr/lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"]);
  });

  it("never reads out of the root, nor what is not a regular file", async () => {
    const root = await rootfs();
    const outside = await rootfs();
    await writeFile(join(outside, "secret"), "host");
    await mkdir(join(root, "etc"));
    await mkdir(join(root, "bin"));
    await symlink(join(outside, "secret"), join(root, "etc/passwd")); // absolute: the host's path
    await symlink("../../../../../../../../" + join(outside, "secret"), join(root, "etc/group")); // climbs out
    execFileSync("mkfifo", [join(root, "etc/profile")]); // would block a plain open
    await mkdir(join(root, "bin/bash")); // a directory
    await writeFile(join(root, "etc/bash.bashrc"), "ok");
    assert.deepEqual(await prefetch(root, ["etc/passwd", "etc/group", "etc/profile", "bin/bash", "etc/bash.bashrc"]), ["etc/bash.bashrc"]);
  });

  it("lists every library this Node.js (the one mounted for envd) loads", () => {
    const ldd = execFileSync("ldd", [process.execPath], { encoding: "utf8" });
    const needed = [...ldd.matchAll(/^\s*(\S+\.so[.\d]*)\s/gm)].map((m) => m[1]!.split("/").pop()!).filter((l) => !l.startsWith("linux-vdso"));
    assert.ok(needed.length > 3, ldd);
    const listed = new Set(HOT_FILES.map((f) => f.split("/").pop()));
    assert.deepEqual(needed.filter((l) => !listed.has(l)), []);
  });
});
