/**
 * closeGracefully: a request in flight at the stop is answered, and its keep-alive
 * connection is closed right after, not at the server's keep-alive timeout.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { closeGracefully } from "./http-close.ts";

test("a connection busy at the stop is closed once its answer is sent; the close does not wait out its keep-alive", async () => {
  let arrived!: () => void;
  const inFlight = new Promise<void>((r) => (arrived = r));
  const server = http.createServer((_req, res) => {
    arrived();
    setTimeout(() => res.end("done"), 200);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const agent = new http.Agent({ keepAlive: true });
  try {
    const answer = new Promise<string>((resolve, reject) => {
      const req = http.get({ host: "127.0.0.1", port: (server.address() as AddressInfo).port, path: "/", agent }, (res) => {
        let body = "";
        res.on("data", (d: Buffer) => (body += d.toString()));
        res.on("end", () => resolve(body));
      });
      req.on("error", reject);
    });
    await inFlight;
    const t0 = Date.now();
    const closed = closeGracefully(() => new Promise<void>((r, j) => server.close((e) => (e ? j(e) : r()))), server);
    assert.equal(await answer, "done", "the request in flight is answered");
    await closed;
    assert.ok(Date.now() - t0 < 5_000, `the close took ${Date.now() - t0} ms (keep-alive 60 s)`);
  } finally {
    agent.destroy();
  }
});
