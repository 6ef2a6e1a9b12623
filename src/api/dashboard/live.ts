/**
 * Server-sent events for the dashboard: one stream per page, a JSON snapshot sent when it
 * changes. The server re-reads the snapshot on a wake (a sandbox started or ended in this
 * process) and at most every `everyMs` (changes made through another replica), and sends
 * it only when it differs from the last one sent: the page never polls, and an idle page
 * costs one read per interval on the server, nothing on the wire but a keep-alive comment.
 *
 * The stream is read with fetch() (the page sends its credential in a header, which
 * EventSource cannot), so this is plain `text/event-stream` over a normal GET.
 */
import type { FastifyReply, FastifyRequest } from "fastify";
import { INTERNAL_MESSAGE, publicMessage, SpaceError } from "../../core/errors.ts";

export interface LiveSource {
  /** The snapshot; thrown errors end the stream with an `error` event (the message only). */
  read(): Promise<unknown>;
  /** Calls `wake` when the snapshot may have changed; returns the unsubscribe. */
  subscribe?(wake: () => void): () => void;
}

const KEEPALIVE_MS = 15_000;

export function streamLive(req: FastifyRequest, reply: FastifyReply, event: string, src: LiveSource, everyMs = 2000): FastifyReply {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-store", connection: "keep-alive", "x-accel-buffering": "no" });
  let last = "";
  let closed = false;
  let running = false;
  let again = false;
  const tick = async () => {
    if (closed) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      const text = JSON.stringify(await src.read());
      if (!closed && text !== last) {
        last = text;
        res.write(`event: ${event}\ndata: ${text}\n\n`);
      }
    } catch (e) {
      if (!closed) res.write(`event: error\ndata: ${JSON.stringify({ message: e instanceof SpaceError ? publicMessage(e) : INTERNAL_MESSAGE })}\n\n`);
    } finally {
      running = false;
    }
    if (again) {
      again = false;
      void tick();
    }
  };
  const timer = setInterval(() => void tick(), everyMs);
  const keepalive = setInterval(() => res.write(": keep-alive\n\n"), KEEPALIVE_MS);
  const unsubscribe = src.subscribe?.(() => void tick()) ?? (() => {});
  const close = () => {
    closed = true;
    clearInterval(timer);
    clearInterval(keepalive);
    unsubscribe();
  };
  req.raw.once("close", close);
  res.once("close", close);
  void tick();
  return reply;
}
