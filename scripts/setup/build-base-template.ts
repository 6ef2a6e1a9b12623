// Builds (once per machine) the cached tarball of the `base` template under .tools/templates.
import { join } from "node:path";
import { createLogger } from "../../src/core/log.ts";
import { ensureBaseTemplateTarball } from "../../src/node/templates/base-template.ts";
import { resolveDebianMirror } from "../../src/node/templates/debian-mirror.ts";

const repo = join(import.meta.dirname, "..", "..");
const logger = createLogger("warn", "setup");
const mirror = await resolveDebianMirror(process.env.SPACE_DEBIAN_MIRROR ?? "");
const t = await ensureBaseTemplateTarball({ cacheDir: join(repo, ".tools", "templates"), mirror, logger, signal: AbortSignal.timeout(30 * 60_000) });
process.stderr.write(`base template: ${t.rootfsSizeMib} MiB rootfs at ${t.tarPath}\n`);
