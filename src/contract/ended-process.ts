/**
 * envd's record of how a tagged process ended (SPACE's own, not E2B's protocol), as the
 * control plane reads it after a restart or a detach: `GET ENDED_PROCESSES_PATH?tag=`.
 * Kept by src/envd/process/ended.ts; read by the control plane's envd client. `zod/mini`,
 * as every contract envd imports (contract/envd-logs.ts says why).
 */
import * as z from "zod/mini";

export const ENDED_PROCESSES_PATH = "/space/processes/ended";

/** Wire shape of one record (envd → control plane). */
export const EndedProcessSchema = z.object({
  tag: z.string(),
  pid: z.int(),
  exit_code: z.int(),
  exited: z.boolean(),
  status: z.string(),
  error: z.nullable(z.string()),
  ended_at: z.string(),
  /** Output written while no stream was attached, in order (base64), its last DETACHED_OUTPUT_BYTES (envd). */
  detached_output: z.array(z.object({ stream: z.enum(["stdout", "stderr", "pty"]), data: z.string() })),
  /** Bytes written while detached that are not in `detached_output` (older than its tail). */
  detached_output_dropped_bytes: z.int().check(z.nonnegative()),
});
export type EndedProcess = z.infer<typeof EndedProcessSchema>;
