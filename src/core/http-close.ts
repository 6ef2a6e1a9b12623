/**
 * Closes a server the way a stop should: no new requests, the ones in flight answered, and
 * each keep-alive connection closed as soon as it goes idle. `server.close()` closes only
 * the connections idle at the moment it is called: one whose answer was still being made
 * then stayed open after it until its keep-alive timeout (fastify's 72 s), and a Ctrl-C of
 * `space up` during a client's kill waited that long to exit.
 */
import type { Server } from "node:http";

const IDLE_CHECK_MS = 50;

export async function closeGracefully(close: () => Promise<unknown>, server: Pick<Server, "closeIdleConnections">): Promise<void> {
  const idle = setInterval(() => server.closeIdleConnections(), IDLE_CHECK_MS);
  try {
    await close();
  } finally {
    clearInterval(idle);
  }
}
