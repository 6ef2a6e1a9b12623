/** envd's ESM entry (`node envd.mjs`, or `tsx src/envd/main.ts` in development). */
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startEnvd } from "./start.ts";

startEnvd(process.argv.slice(2), dirname(fileURLToPath(import.meta.url)));
