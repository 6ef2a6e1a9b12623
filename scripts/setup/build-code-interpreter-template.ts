// Builds (once per machine) the cached tarball of the `code-interpreter-v1` template beside
// the base one under .tools/templates (or SPACE_BASE_TEMPLATE_DIR): base + the pinned PyPI
// packages + the server (src/node/templates/code-interpreter-template.ts). Prints how long
// it took and the sizes.
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { loadConfig } from "../../src/core/config.ts";
import { createLogger } from "../../src/core/log.ts";
import { ensureCodeInterpreterTarball } from "../../src/node/templates/code-interpreter-template.ts";
import { resolveDebianMirror } from "../../src/node/templates/debian-mirror.ts";

const repo = join(import.meta.dirname, "..", "..");
const config = loadConfig(process.env);
const logger = createLogger("warn", "setup");
const mirror = await resolveDebianMirror(config.SPACE_DEBIAN_MIRROR);
const started = Date.now();
const t = await ensureCodeInterpreterTarball({
  cacheDir: config.SPACE_BASE_TEMPLATE_DIR || join(repo, ".tools", "templates"),
  mirror,
  logger,
  signal: AbortSignal.timeout(45 * 60_000),
});
const tarMib = Math.ceil((await stat(t.tarPath)).size / 1048576);
process.stderr.write(`${t.name} template: ${t.rootfsSizeMib} MiB rootfs, ${tarMib} MiB tarball at ${t.tarPath} (${((Date.now() - started) / 1000).toFixed(0)} s)\n`);
