import type { ServerResponse } from "node:http";
import { SpaceError, httpStatus } from "../../core/errors.ts";
import { fsError } from "../connect-errors.ts";

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** E2B's envd error body: `{"code":<status>,"message":"..."}`. */
export function sendError(res: ServerResponse, e: unknown): void {
  const se = SpaceError.from(fsError(e));
  const status = httpStatus[se.code];
  if (res.headersSent) {
    res.destroy(se);
    return;
  }
  sendJson(res, status, { code: status, message: se.message });
}
