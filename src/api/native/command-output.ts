/**
 * GET /v1/sandboxes/:id/commands/:cid/output — pages of output chunks after a seq
 * (`?after=<seq>&limit=`), or with `?follow` an NDJSON stream: every chunk from `after`
 * on as it arrives, then one `{"end":true,…}` line once the command ended and all its
 * output was sent. Output lives in the database, so a slow reader holds nothing but its
 * own socket (writes wait for the socket to drain), and a reader can reattach anywhere.
 */
import type { FastifyInstance } from "fastify";
import { COMMAND_OUTPUT_CHANNEL } from "../../operations/command-run.ts";
import { finishedCommandStates, getCommand, readCommandOutput } from "../../store/commands.ts";
import type { NativeDeps } from "./deps.ts";
import { commandOf } from "./commands.ts";
import { parse, tenantWith } from "./native-edge.ts";
import { toChunk } from "./native-present.ts";
import { CommandParams, OutputQuery } from "./native-schemas.ts";

const POLL_MS = 250;

export function registerCommandOutputRoutes(app: FastifyInstance, deps: NativeDeps): void {
  app.get("/v1/sandboxes/:id/commands/:cid/output", async (req, reply) => {
    const { tenantId } = await tenantWith(deps, req, "commands:exec");
    const { id, cid } = parse(CommandParams, req.params, "path");
    const q = parse(OutputQuery, req.query, "query");
    const cmd = await commandOf(deps, tenantId, id, cid);

    if (!q.follow) {
      const page = await readCommandOutput(deps.db, cid, { afterSeq: q.after, limit: q.limit });
      // Re-read after the page: "done" only when the command had ended before we read.
      const done = finishedCommandStates.includes(cmd.state) && page.nextSeq >= cmd.outputChunks;
      return { chunks: page.chunks.map(toChunk), next_after: page.nextSeq, done, state: cmd.state, exit_code: cmd.exitCode };
    }

    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store", "x-accel-buffering": "no" });
    let closed = false;
    let wake: (() => void) | undefined;
    res.on("close", () => {
      closed = true;
      wake?.();
    });
    const unlisten = await deps.db.listen(COMMAND_OUTPUT_CHANNEL, (payload) => {
      if (payload === cid) wake?.();
    });
    const write = async (obj: unknown) => {
      if (res.write(JSON.stringify(obj) + "\n")) return;
      await new Promise<void>((resolve) => {
        const done = () => {
          res.off("drain", done);
          res.off("close", done);
          resolve();
        };
        res.on("drain", done);
        res.on("close", done);
      });
    };
    try {
      let after = q.after;
      while (!closed) {
        // Read the state before the output: if it had ended, this read sees all output.
        const state = await getCommand(deps.db, cid, id);
        const page = await readCommandOutput(deps.db, cid, { afterSeq: after, limit: q.limit });
        for (const c of page.chunks) {
          if (closed) break;
          await write(toChunk(c));
        }
        after = page.nextSeq;
        if (page.chunks.length > 0) continue;
        if (finishedCommandStates.includes(state.state)) {
          await write({ end: true, state: state.state, exit_code: state.exitCode, error: state.error, next_after: after });
          break;
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(done, POLL_MS);
          function done() {
            clearTimeout(t);
            wake = undefined;
            resolve();
          }
          wake = done;
        });
      }
    } catch (e: unknown) {
      req.log.warn({ err: e, commandId: cid }, "output follow ended with an error");
      if (!closed) res.write(JSON.stringify({ error: { message: (e as Error).message } }) + "\n");
    } finally {
      await unlisten().catch(() => {});
      res.end();
    }
  });
}
