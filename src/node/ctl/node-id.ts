import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { newNodeId, type NodeId } from "../../core/ids.ts";

/** The node's UUID, read from `<node dir>/node-id`, created once. */
export async function ensureNodeId(nodeDir: string): Promise<NodeId> {
  const path = join(nodeDir, "node-id");
  const have = await readFile(path, "utf8").then((s) => s.trim(), () => "");
  if (/^[0-9a-f-]{36}$/.test(have)) return have as NodeId;
  const id = newNodeId();
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, `${id}\n`, { flag: "w" });
  return id;
}
