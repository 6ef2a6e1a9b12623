import { test } from "node:test";
import assert from "node:assert/strict";
import { parseCpPath, shellLine } from "./sandbox-io.ts";

test("exec: one argument is a shell line, several are quoted and joined", () => {
  assert.equal(shellLine(["echo $HOME | wc -c"]), "echo $HOME | wc -c");
  assert.equal(shellLine(["sh", "-c", "echo 'a b'"]), `sh -c 'echo '\\''a b'\\'''`);
  assert.equal(shellLine(["ls", "-la", "/home/user"]), "ls -la /home/user");
});

test("cp: <id>:/path is the sandbox side, anything else is local", () => {
  assert.deepEqual(parseCpPath("abc123:/home/user/x"), { sandboxId: "abc123", path: "/home/user/x" });
  assert.deepEqual(parseCpPath("./x:y"), { local: "./x:y" });
  assert.deepEqual(parseCpPath("/tmp/a"), { local: "/tmp/a" });
});
