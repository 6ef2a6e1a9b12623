/**
 * The secrets `space up` hands out (admin token, internal node token, the default API
 * key), generated once and kept in the data directory (mode 0600) so a restart prints
 * the same values. The database stores only hashes of the API key.
 */
import { existsSync, readFileSync, writeFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { newSecret } from "../core/ids.ts";
import { newApiKeySecret } from "../store/api-keys.ts";
import { SpaceError } from "../core/errors.ts";

const Secrets = z.object({ adminToken: z.string().min(16), internalToken: z.string().min(16), apiKey: z.string().min(16) });
export type Secrets = z.infer<typeof Secrets>;

export function ensureSecrets(dataDir: string): Secrets {
  const path = join(dataDir, "secrets.json");
  if (existsSync(path)) {
    const r = Secrets.safeParse(JSON.parse(readFileSync(path, "utf8")));
    if (!r.success) throw new SpaceError("failed_precondition", `${path} is damaged (${r.error.issues[0]?.message}); remove it to generate new secrets`);
    return r.data;
  }
  const secrets: Secrets = { adminToken: newSecret("spa"), internalToken: newSecret("spi"), apiKey: newApiKeySecret() };
  writeFileSync(`${path}.tmp`, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
  return secrets;
}
