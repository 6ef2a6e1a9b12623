/**
 * The operator's CA certificates inside build containers and sandboxes
 * (SPACE_EXTRA_CA_CERTS with SPACE_EXTRA_CA_CERTS_IN_SANDBOXES=true): companies behind a
 * TLS-inspecting proxy need `pip install` and `curl https://…` to trust its CA. The PEM
 * bundle is appended to the rootfs's own trust store (/etc/ssl/certs/ca-certificates.crt,
 * created when the image has none) before a RUN step or a sandbox boots, once (a rootfs
 * that already holds it is left alone), and the variables tools read instead of the system
 * store point at that file. A template built with it on keeps the CA in its bundle.
 */
import { appendFile, mkdir, readFile } from "node:fs/promises";
import { dirname } from "node:path";
import { resolveInRoot } from "./rootfs-fs.ts";

export const TRUST_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/** What boots and builds apply to a rootfs (sandbox-boot.ts, builder.ts). */
export interface RootfsTrust {
  /** Variables pointing Python (requests, pip), Node.js and OpenSSL at the trust store. */
  readonly env: Readonly<Record<string, string>>;
  /** Appends the operator's CAs to `rootfs`'s trust store unless they are there already. */
  apply(rootfs: string): Promise<void>;
}

const PEM = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** The trust of `pemPath`'s certificates; throws when it holds none. */
export async function loadRootfsTrust(pemPath: string): Promise<RootfsTrust> {
  const text = await readFile(pemPath, "utf8").catch((e: unknown) => {
    throw new Error(`SPACE_EXTRA_CA_CERTS ${pemPath} cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  });
  const certs = text.match(PEM) ?? [];
  if (!certs.length) throw new Error(`SPACE_EXTRA_CA_CERTS ${pemPath} holds no PEM certificate`);
  const block = `\n# SPACE_EXTRA_CA_CERTS (added by SPACE)\n${certs.join("\n")}\n`;
  return {
    env: { SSL_CERT_FILE: TRUST_BUNDLE, REQUESTS_CA_BUNDLE: TRUST_BUNDLE, NODE_EXTRA_CA_CERTS: TRUST_BUNDLE, PIP_CERT: TRUST_BUNDLE, CURL_CA_BUNDLE: TRUST_BUNDLE },
    async apply(rootfs) {
      const path = await resolveInRoot(rootfs, TRUST_BUNDLE);
      const have = await readFile(path, "utf8").catch(() => "");
      if (certs.every((c) => have.includes(c))) return;
      await mkdir(dirname(path), { recursive: true });
      await appendFile(path, block, { mode: 0o644 });
    },
  };
}
