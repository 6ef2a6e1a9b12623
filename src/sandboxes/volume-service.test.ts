/** The pure parts of volumes: names, mount paths, E2B's `{name, path}` with `:ro`, the content API's `domain`. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { SpaceError } from "../core/errors.ts";
import { validateVolumeMounts, validateVolumeName, volumeDomain } from "./volume-service.ts";
import { fromEcwMount, toEcwMount } from "../api/ecw/volume-mounts.ts";

const invalidNaming = (text: RegExp) => (e: unknown) => e instanceof SpaceError && e.code === "invalid_argument" && text.test(e.message);
const mount = (path: string, name = "data") => ({ name, path, readOnly: false });

test("E2B's {name, path}: a name ending in ':ro' mounts read-only, and an answer names it so again", () => {
  assert.deepEqual(fromEcwMount({ name: "data", path: "/mnt/d" }), { name: "data", path: "/mnt/d", readOnly: false });
  assert.deepEqual(fromEcwMount({ name: "data:ro", path: "/mnt/d" }), { name: "data", path: "/mnt/d", readOnly: true });
  // Only the one suffix is stripped: what is left is still checked as a name (and refused, naming it).
  assert.deepEqual(fromEcwMount({ name: "data:ro:ro", path: "/x" }), { name: "data:ro", path: "/x", readOnly: true });
  assert.throws(() => validateVolumeName("data:ro"), invalidNaming(/^volume name "data:ro" is not valid/));
  for (const m of [{ name: "data", path: "/a" }, { name: "data:ro", path: "/b" }]) assert.deepEqual(toEcwMount(fromEcwMount(m)), m);
});

test("volume names: 1-63 letters, digits, '.', '_', '-', starting with a letter or digit; a refusal names the value", () => {
  for (const ok of ["a", "Data.set_1-x", "9", "x".repeat(63)]) validateVolumeName(ok);
  for (const bad of ["", "-a", ".a", "a b", "a/b", "x".repeat(64), "é"]) {
    assert.throws(() => validateVolumeName(bad), (e: unknown) => invalidNaming(/is not valid/)(e) && (e as Error).message.startsWith(`volume name ${JSON.stringify(bad)} `), bad);
  }
});

test("mount paths: absolute and clean, not reserved, not twice; each refusal names the path", () => {
  validateVolumeMounts([mount("/mnt/data"), mount("/home/user/cache", "c"), mount("/data", "data")]);
  for (const bad of ["mnt", "/", "/mnt/", "/a//b", "/a/./b", "/a/../b", `/${"x".repeat(1024)}`]) {
    assert.throws(() => validateVolumeMounts([mount(bad)]), invalidNaming(/^volume mount path .* must be an absolute path/), bad);
  }
  for (const reserved of ["/proc", "/etc/x", "/opt/space", "/usr/local", "/dev/shm", "/lib64"]) {
    assert.throws(() => validateVolumeMounts([mount(reserved)]), invalidNaming(new RegExp(`^volume mount path ${reserved} is reserved$`)), reserved);
  }
  // Prefixes of reserved paths that are other directories are fine.
  validateVolumeMounts([mount("/procfs"), mount("/etcetera", "b"), mount("/libs", "c")]);
  assert.throws(() => validateVolumeMounts([mount("/d"), mount("/d", "other")]), invalidNaming(/^volume mount path \/d is given twice$/));
  assert.throws(() => validateVolumeMounts([mount("/d", "bad name")]), invalidNaming(/^volume name "bad name" is not valid/));
});

test("the content API's domain: only an https://api.<domain> public URL hands one out", () => {
  assert.equal(volumeDomain("https://api.space.example.com"), "space.example.com");
  assert.equal(volumeDomain("https://api.space.example.com:8443/"), "space.example.com:8443");
  for (const none of ["", "http://api.x.com", "https://x.com", "https://api.x.com/prefix", "not a url"]) assert.equal(volumeDomain(none), undefined, none);
});
