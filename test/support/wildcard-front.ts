/**
 * What a deployment's TLS front with wildcard DNS does for SDKs without apiUrl/sandboxUrl
 * (e2b 1.x, 2.0): they call https://api.<domain> and https://<port>-<id>.<domain>. Played
 * inside the test process: a stack whose create answers name `domain`, and fetch wrapped
 * to send api.<domain> to the API and <port>-<id>.<domain> to the gateway's path form.
 */
import { startStack, type Stack } from "./stack.ts";

export async function startStackBehindFront(domain: string): Promise<{ stack: Stack; restoreFetch: () => void }> {
  const stack = await startStack({ env: { SPACE_SANDBOX_DOMAIN: domain } });
  const realFetch = globalThis.fetch;
  const host = new RegExp(`^(\\d+)-([a-z0-9]+)\\.${domain.replaceAll(".", "\\.")}$`);
  const rewrite = (url: string): string => {
    const u = new URL(url);
    if (u.hostname === `api.${domain}`) return `${stack.apiUrl}${u.pathname}${u.search}`;
    const m = host.exec(u.hostname);
    return m ? `${stack.sandboxUrl}/sandboxes/${m[2]}/ports/${m[1]}${u.pathname}${u.search}` : url;
  };
  globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
    if (input instanceof Request) return realFetch(new Request(rewrite(input.url), input), init);
    return realFetch(rewrite(String(input)), init);
  }) as typeof fetch;
  return { stack, restoreFetch: () => (globalThis.fetch = realFetch) };
}
