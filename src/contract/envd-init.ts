/**
 * envd's `POST /init` (E2B's envd protocol): what the node sends when a sandbox starts, is
 * restored or is handed over from a warm pool — its env vars and access token — stamped
 * with the node's time. envd reads these fields and ignores others (E2B's orchestrator
 * sends more). `zod/mini`, as every contract envd imports (contract/envd-logs.ts says why).
 */
import * as z from "zod/mini";

export const ENVD_INIT_PATH = "/init";

export const EnvdInitBody = z.object({
  envVars: z.optional(z.record(z.string(), z.string())),
  accessToken: z.optional(z.string()),
  defaultUser: z.optional(z.string()),
  defaultWorkdir: z.optional(z.string()),
  timestamp: z.optional(z.string()),
});
export type EnvdInitBody = z.infer<typeof EnvdInitBody>;
