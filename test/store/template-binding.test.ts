// A template's execution-environment binding from node inventories (templateBinding,
// read in the database by templateEnvironmentsOnNodes), on both engines: only ready and
// draining nodes, only entries naming the template with a non-empty string environment,
// each environment once, ordered by the first node reporting it.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import type { NodeId } from "../../src/core/ids.ts";
import { registerNode, setNodeStatus } from "../../src/store/nodes.ts";
import { templateBinding } from "../../src/sandboxes/queries.ts";
import { freshDb, testEngines, type TestDb } from "../support/db.ts";

const ENV_1 = "sha256:111111111111111111";
const ENV_2 = "sha256:222222222222222222";

for (const engine of testEngines()) {
  describe(`template binding from node inventories (${engine.name})`, { skip: engine.skip }, () => {
    let t: TestDb;
    const node = async (name: string, templates: unknown, status?: "draining" | "fenced" | "unavailable") => {
      const id = randomUUID() as NodeId;
      await registerNode(t.db, { id, name, address: `http://127.0.0.1:1/${name}`, templates: templates as unknown[] });
      if (status) await setNodeStatus(t.db, id, status);
    };
    before(async () => {
      t = await freshDb(engine.name);
    });
    after(async () => t.drop());

    it("binds to the one environment ready nodes report, ignoring malformed entries and other nodes", async () => {
      await node("a", [{ templateId: "base", rootfsSizeMib: 1, environment: ENV_1 }, { templateId: "other", environment: ENV_2 }]);
      await node("b", ["base", { templateId: "base", environment: "" }, { templateId: 7, environment: ENV_2 }, null]);
      await node("c", [{ templateId: "base", environment: ENV_1 }], "draining");
      await node("d", [{ templateId: "base", environment: ENV_2 }], "fenced");
      await node("e", [{ templateId: "base", environment: ENV_2 }], "unavailable");
      assert.deepEqual(await templateBinding(t.db, "base"), { kind: "bound", environment: ENV_1, source: "node template inventory" });
      assert.deepEqual(await templateBinding(t.db, "nope"), { kind: "none" });
    });

    it("is unreadable when ready nodes disagree, naming the environments in node order", async () => {
      await node("0-first", [{ templateId: "base", environment: ENV_2 }]);
      const b = await templateBinding(t.db, "base");
      assert.deepEqual(b, { kind: "unreadable", reason: `nodes report 2 different environments for template base: ${ENV_2}, ${ENV_1}` });
    });
  });
}
