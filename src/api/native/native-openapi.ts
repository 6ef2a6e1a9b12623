/**
 * GET /v1/openapi.json: an OpenAPI 3.1 document generated from the same zod schemas the
 * routes validate with (zod v4 `toJSONSchema`, draft 2020-12 = OpenAPI 3.1's dialect).
 */
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { VERSION } from "../../core/version.ts";
import { OpenApiSchemas, type Json } from "../openapi-schemas.ts";
import * as S from "./native-schemas.ts";

const schemas = new OpenApiSchemas();
const hoisted = schemas.hoisted;
const schema = (s: z.ZodType, io: "input" | "output" = "output"): Json => schemas.schema(s, io);

function errors(...codes: number[]): Json {
  const out: Json = {};
  for (const c of codes) out[String(c)] = { description: describe(c), content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } };
  return out;
}
/** A cursor page's errors: its 400 includes a cursor this server did not issue. */
const pageErrors = (): Json => {
  const out = errors(400, 401, 403);
  out["400"] = { ...(out["400"] as Json), description: "invalid request (the message names the field), or a cursor that is not a next_cursor this server issued" };
  return out;
};
function describe(c: number): string {
  return (
    {
      400: "invalid request (the message names the field)",
      401: "missing or unknown credentials",
      403: "the token lacks the named scope",
      404: "not found (another tenant's resources are not found too)",
      409: "idempotency_conflict: the Idempotency-Key was used with a different request",
      429: "resource_exhausted: a create rate limit of the tenant or the credential (Retry-After: seconds until it admits one more)",
      501: "not available in this build (the message says why)",
    } as Record<number, string>
  )[c] ?? "error";
}

const accepted = { "202": { description: "accepted: the operation", content: { "application/json": { schema: { $ref: "#/components/schemas/Operation" } } } } };
const ok = (ref: string) => ({ "200": { description: "ok", content: { "application/json": { schema: { $ref: `#/components/schemas/${ref}` } } } } });
const idem = { name: "Idempotency-Key", in: "header", required: false, schema: { type: "string", minLength: 1, maxLength: 255 }, description: "same key + same body replays the original operation; a different body is 409" };
const pathId = (name: string) => ({ name, in: "path", required: true, schema: { type: "string" } });
const body = (ref: string, required = true) => ({ required, content: { "application/json": { schema: { $ref: `#/components/schemas/${ref}` } } } });
const query = (s: z.ZodObject) =>
  Object.entries((schema(s, "input").properties ?? {}) as Record<string, Json>).map(([name, sch]) => ({ name, in: "query", required: false, schema: sch }));

export function buildOpenApi(): Json {
  const mutation = (summary: string, scope: string, extra: Json = {}, more: number[] = []) => ({ summary, "x-required-scope": scope, parameters: [idem, ...((extra.parameters as unknown[]) ?? [])], ...extra, responses: { ...accepted, ...errors(400, 401, 403, 404, 409, ...more) } });
  const lifecycle = (verb: string, summary: string, unsupported = false) => ({
    post: {
      summary,
      "x-required-scope": "sandboxes:write",
      parameters: [pathId("id"), idem],
      requestBody: body(verb === "fork" ? "ForkSandbox" : verb === "suspend" ? "SuspendSandbox" : "Empty", false),
      responses: { ...accepted, ...errors(400, 401, 403, 404, 409, ...(unsupported ? [501] : [])) },
    },
  });
  const named = {
    Error: schema(S.ErrorBody),
    Operation: schema(S.Operation),
    OperationList: schema(S.OperationList),
    CreateSandbox: schema(S.CreateSandboxBody, "input"),
    NetworkSpec: schema(S.NetworkSpec, "input"),
    NetworkObservation: schema(S.NetworkObservation),
    Empty: schema(S.EmptyBody, "input"),
    ForkSandbox: schema(S.ForkSandboxBody, "input"),
    SuspendSandbox: schema(S.SuspendSandboxBody, "input"),
    Sandbox: schema(S.Sandbox),
    SandboxList: schema(S.SandboxList),
    RunCommand: schema(S.RunCommandBody, "input"),
    Command: schema(S.Command),
    OutputChunk: schema(S.OutputChunk),
    OutputPage: schema(S.OutputPage),
    CancelCommand: schema(S.CancelCommandBody, "input"),
    CreateVolume: schema(S.CreateVolumeBody, "input"),
    Volume: schema(S.Volume),
    VolumeList: schema(S.VolumeList),
    CreateApiKey: schema(S.CreateApiKeyBody, "input"),
    ApiKey: schema(S.ApiKey),
    ApiKeyList: schema(S.ApiKeyList),
    NewApiKey: schema(S.NewApiKey),
    CreateToken: schema(S.CreateTokenBody, "input"),
    Token: schema(S.Token),
    TokenList: schema(S.TokenList),
    NewToken: schema(S.NewToken),
  };
  const created = (ref: string) => ({ "201": { description: "created; the secret is in this answer only", content: { "application/json": { schema: { $ref: `#/components/schemas/${ref}` } } } } });
  const revoked = { "204": { description: "revoked: requests with it are refused from now on (401)" } };
  const credentials = (noun: string, list: string, create: string, made: string, createSummary: string) => ({
    [`/v1/${noun}`]: {
      get: { summary: `list this tenant's ${noun === "tokens" ? "tokens" : "API keys"} (prefix, last use, revocation; never the secret)`, "x-required-scope": "credentials:read", responses: { ...ok(list), ...errors(401, 403) } },
      post: { summary: createSummary, "x-required-scope": "credentials:write", requestBody: body(create, noun === "tokens"), responses: { ...created(made), ...errors(400, 401, 403) } },
    },
    [`/v1/${noun}/{id}`]: {
      delete: { summary: `revoke one of this tenant's ${noun === "tokens" ? "tokens" : "API keys"} (at once)`, "x-required-scope": "credentials:write", parameters: [pathId("id")], responses: { ...revoked, ...errors(400, 401, 403, 404) } },
    },
  });
  return {
    openapi: "3.1.0",
    info: { title: "SPACE Native API", version: VERSION, description: "Every mutation answers 202 with a durable operation; poll GET /v1/operations/{id}?wait=30s." },
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
      schemas: { ...hoisted, ...named },
    },
    security: [{ bearer: [] }],
    paths: {
      "/v1/sandboxes": {
        post: mutation("create a sandbox", "sandboxes:write", { requestBody: body("CreateSandbox") }, [429]),
        get: { summary: "list sandboxes (cursor pages)", "x-required-scope": "sandboxes:read", parameters: query(S.ListSandboxesQuery), responses: { ...ok("SandboxList"), ...pageErrors() } },
      },
      "/v1/sandboxes/{id}": {
        get: { summary: "get a sandbox: a live one, or a failed one with its reason (a killed one is 404)", "x-required-scope": "sandboxes:read", parameters: [pathId("id")], responses: { ...ok("Sandbox"), ...errors(400, 401, 403, 404) } },
        delete: mutation("delete (kill) a sandbox", "sandboxes:write", { parameters: [pathId("id")] }),
      },
      "/v1/sandboxes/{id}/network": {
        get: { summary: "network record: destinations observed (mode observe) and refused, with a proposed allow list", "x-required-scope": "sandboxes:read", parameters: [pathId("id")], responses: { ...ok("NetworkObservation"), ...errors(400, 401, 403, 404) } },
      },
      "/v1/sandboxes/{id}/pause": lifecycle("pause", "freeze in memory (resident pause)"),
      "/v1/sandboxes/{id}/resume": lifecycle("resume", "resume a paused sandbox"),
      "/v1/sandboxes/{id}/suspend": lifecycle("suspend", "checkpoint to storage (memory and disk; answers once the capture is safe on the node, published to the blob store behind it)", true),
      "/v1/sandboxes/{id}/restore": lifecycle("restore", "restore a suspended sandbox (on any node once its snapshot is durable)", true),
      "/v1/sandboxes/{id}/stop": lifecycle("stop", "stop: processes end, the rootfs is kept"),
      "/v1/sandboxes/{id}/start": lifecycle("start", "boot a stopped sandbox again from its kept rootfs"),
      "/v1/sandboxes/{id}/fork": lifecycle("fork", "fork a running sandbox", true),
      "/v1/sandboxes/{id}/commands": {
        post: { ...mutation("run a command", "commands:exec", { requestBody: body("RunCommand") }), parameters: [pathId("id"), idem] },
      },
      "/v1/sandboxes/{id}/commands/{cid}": {
        get: { summary: "get a command (state, pid, exit code)", "x-required-scope": "commands:exec", parameters: [pathId("id"), pathId("cid")], responses: { ...ok("Command"), ...errors(400, 401, 403, 404) } },
      },
      "/v1/sandboxes/{id}/commands/{cid}/output": {
        get: {
          summary: "page output chunks after a seq, or follow as NDJSON (?follow)",
          "x-required-scope": "commands:exec",
          parameters: [pathId("id"), pathId("cid"), ...query(S.OutputQuery)],
          responses: { ...ok("OutputPage"), ...errors(400, 401, 403, 404) },
        },
      },
      "/v1/sandboxes/{id}/commands/{cid}/cancel": {
        post: { ...mutation("cancel (signal) a command", "commands:exec", { requestBody: body("CancelCommand", false) }), parameters: [pathId("id"), pathId("cid"), idem] },
      },
      "/v1/volumes": {
        post: mutation("create a volume (the name is a 409 at once when the tenant has it)", "volumes:write", { requestBody: body("CreateVolume") }),
        get: { summary: "list volumes", "x-required-scope": "volumes:read", responses: { ...ok("VolumeList"), ...errors(401, 403) } },
      },
      "/v1/volumes/{id}": {
        get: { summary: "get a volume by id or name, with its content token and the sandboxes holding it", "x-required-scope": "volumes:read", parameters: [pathId("id")], responses: { ...ok("Volume"), ...errors(400, 401, 403, 404) } },
        delete: mutation("delete a volume (409 while a sandbox holds it)", "volumes:write", { parameters: [pathId("id")] }),
      },
      ...credentials("api-keys", "ApiKeyList", "CreateApiKey", "NewApiKey", "create an API key (it carries every tenant scope: the caller must hold them all)"),
      ...credentials("tokens", "TokenList", "CreateToken", "NewToken", "create a scoped token (a token may grant only its own scopes, must give expires_in_s, and cannot outlive itself; admin is never granted)"),
      "/v1/operations": {
        get: { summary: "list operations (newest first)", parameters: query(S.ListOperationsQuery), responses: { ...ok("OperationList"), ...pageErrors() } },
      },
      "/v1/operations/{id}": {
        get: {
          summary: "get an operation; ?wait=30s long-polls until it ends",
          parameters: [pathId("id"), ...query(S.GetOperationQuery)],
          responses: { ...ok("Operation"), ...errors(400, 401, 403, 404) },
        },
      },
    },
  };
}

export function registerOpenApiRoute(app: FastifyInstance): void {
  let doc: Json | undefined;
  app.get("/v1/openapi.json", async () => (doc ??= buildOpenApi()));
}
