import { test } from "node:test";
import assert from "node:assert/strict";
import { parseOciRef } from "./build-recipe.ts";

const D = `sha256:${"ab".repeat(32)}`;

test("oci:// references: an absolute path, with a tag, a digest or both", () => {
  assert.deepEqual(parseOciRef("oci:///srv/images/app"), { path: "/srv/images/app" });
  assert.deepEqual(parseOciRef("oci:///srv/images/app:v1"), { path: "/srv/images/app", tag: "v1" });
  assert.deepEqual(parseOciRef(`oci:///srv/app.tar@${D}`), { path: "/srv/app.tar", digest: D });
  assert.deepEqual(parseOciRef(`oci:///srv/app:v1@${D}`), { path: "/srv/app", tag: "v1", digest: D });
  // A colon inside a directory name is not a tag.
  assert.deepEqual(parseOciRef("oci:///srv/a:b/app"), { path: "/srv/a:b/app" });
});

test("oci:// references: relative paths, .. segments, bad tags and digests are refused", () => {
  for (const bad of ["oci://srv/app", "oci://", "oci:///srv/../etc/app", "oci:///srv/app:", "oci:///srv/app:bad tag", "oci:///srv/app@sha256:short", "oci:/srv/app", "docker://x/y"]) {
    assert.equal(parseOciRef(bad), undefined, bad);
  }
});
