/**
 * connect-node's `connectNodeAdapter`, with one difference: a unary call whose binary
 * body is not a valid message is `invalid_argument` (HTTP 400), as E2B's envd (connect-go)
 * answers it. connect-es decodes the request before any interceptor and reports a decode
 * failure as `internal` (500), so the body is decoded once here first.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter, type ConnectRouter, type ConnectRouterOptions } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { compressionBrotli, compressionGzip, universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";

export function connectAdapter(options: ConnectRouterOptions & { routes(router: ConnectRouter): void }): (req: IncomingMessage, res: ServerResponse) => void {
  const router = createConnectRouter({ acceptCompression: [compressionGzip, compressionBrotli], ...options });
  options.routes(router);
  const paths = new Map<string, UniversalHandler>();
  for (const h of router.handlers) paths.set(h.requestPath, h.method.methodKind === "unary" ? checkedUnary(h) : h);
  return (req, res) => {
    const handler = paths.get(req.url?.split("?", 2)[0] ?? "");
    if (!handler) {
      res.writeHead(404);
      res.end();
      return;
    }
    handler(universalRequestFromNodeRequest(req, res, undefined, undefined))
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((reason: unknown) => {
        // Aborted: the client went away mid-answer, nothing is left to tell it.
        if (ConnectError.from(reason).code !== Code.Aborted) console.error(`envd: rpc ${handler.requestPath} failed`, reason);
      });
  };
}

function checkedUnary(h: UniversalHandler): UniversalHandler {
  const wrapped = async (req: UniversalServerRequest): Promise<UniversalServerResponse> => {
    const type = req.header.get("content-type") ?? "";
    if (!/^application\/proto\b/.test(type) || req.header.has("content-encoding") || !isIterable(req.body)) return h(req);
    const bytes = await collect(req.body);
    try {
      fromBinary(h.method.input, bytes);
    } catch (e) {
      const message = `cannot decode ${h.method.input.typeName} from the request body: ${e instanceof Error ? e.message : String(e)}`;
      return invalidArgument(new ConnectError(message, Code.InvalidArgument));
    }
    return h({ ...req, body: once(bytes) });
  };
  return Object.assign(wrapped, { requestPath: h.requestPath, method: h.method, service: h.service, protocolNames: h.protocolNames, allowedMethods: h.allowedMethods, supportedContentType: h.supportedContentType });
}

function invalidArgument(e: ConnectError): UniversalServerResponse {
  return {
    status: 400,
    header: new Headers({ "content-type": "application/json" }),
    body: once(new TextEncoder().encode(JSON.stringify({ code: "invalid_argument", message: e.rawMessage }))),
  };
}

const isIterable = (b: unknown): b is AsyncIterable<Uint8Array> => typeof b === "object" && b !== null && Symbol.asyncIterator in b;

async function collect(body: AsyncIterable<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const c of body) chunks.push(c);
  return Buffer.concat(chunks);
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}
