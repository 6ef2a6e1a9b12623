/* eslint-disable @typescript-eslint/no-explicit-any -- JSON response bodies of the API under test are read loosely */
/**
 * Native API test harness: a fresh database (PGlite or real Postgres), the real sandbox
 * layer over a FakeSubstrate, a fake envd (a Connect server speaking process.Process)
 * standing in for the node proxy, the real `/v1` routes in the real API app shell, and a
 * real dispatcher. Requests go through Fastify `inject`.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { FastifyInstance } from "fastify";
import { pino } from "pino";
import { Registry } from "prom-client";
import { freshDb, type TestDb } from "../support/db.ts";
import { createApiApp } from "../../src/api/app.ts";
import { authenticateBearer, bearerOf } from "../../src/api/auth.ts";
import { createSandboxLayer } from "../../src/sandboxes/index.ts";
import type { SandboxService } from "../../src/sandboxes/service.ts";
import { registerNativeRoutes } from "../../src/api/native/native-routes.ts";
import { startDispatcher, type Dispatcher } from "../../src/controller/dispatcher.ts";
import type { HandlerMap } from "../../src/operations/handler.ts";
import { Process } from "../../src/gen/process/process_pb.ts";
import { ENDED_PROCESSES_PATH, type EndedProcess } from "../../src/contract/ended-process.ts";
import type { Engine, Db } from "../../src/store/db.ts";
import { createTenant, type Tenant } from "../../src/store/tenants.ts";
import { createToken } from "../../src/store/tokens.ts";
import { registerNode } from "../../src/store/nodes.ts";
import { FakeSubstrate } from "../../src/substrate/fake-substrate.ts";
import type { ProxyTarget, SandboxRef } from "../../src/substrate/substrate.ts";
import type { NodeId } from "../../src/core/ids.ts";

export const log = pino({ level: process.env.SPACE_TEST_LOG ?? "silent" });
export const ALL_SCOPES = ["sandboxes:read", "sandboxes:write", "commands:exec"];

/** A FakeSubstrate whose proxy target is the fake envd's root. */
export class EnvdFakeSubstrate extends FakeSubstrate {
  envdUrl = "http://127.0.0.1:9";
  override async proxyTarget(_ref: SandboxRef, _port: number): Promise<ProxyTarget> {
    return { baseUrl: new URL(this.envdUrl), headers: { "x-space-node-token": "internal" } };
  }
}

interface FakeProc {
  pid: number;
  tag: string | undefined;
  cmd: string;
  events: Array<{ case: "data"; stream: "stdout" | "stderr"; data: Uint8Array } | { case: "end"; exitCode: number; exited: boolean; status: string }>;
  wake: Set<() => void>;
  ended: boolean;
  /** Streams attached now; output pushed while none is kept for the ended record, like envd. */
  attached: number;
  detached: Array<{ stream: "stdout" | "stderr"; data: Uint8Array }>;
}

/**
 * Scripted commands: `echo <args…>`, `true`, `false` (exit 1), `sleep <s>`, `spew <n>`
 * (n lines of 1 KiB), `fail-stream` (breaks the stream once after the start event);
 * anything else is refused like a missing binary (invalid_argument). Like envd, it
 * answers `GET /space/processes/ended?tag=` for tagged processes that ended.
 */
export class FakeEnvd {
  readonly procs = new Map<number, FakeProc>();
  readonly started: string[] = [];
  private nextPid = 100;
  private server: Server | undefined;
  url = "";
  breakOnce = new Set<string>();

  async listen(): Promise<string> {
    const impl: Partial<ServiceImpl<typeof Process>> = {
      start: (req, ctx) => {
        const cfg = req.process!;
        const known = ["echo", "true", "false", "sleep", "spew", "fail-stream"];
        if (!known.includes(cfg.cmd)) throw new ConnectError(`cannot start ${JSON.stringify(cfg.cmd)}: spawn ${cfg.cmd} ENOENT`, Code.InvalidArgument);
        const p = this.spawn(cfg.cmd, cfg.args, req.tag);
        if (cfg.cmd === "fail-stream") this.breakOnce.add(String(p.pid));
        return this.stream(p, ctx.signal);
      },
      connect: (req, ctx) => {
        const sel = req.process?.selector;
        const p = [...this.procs.values()].find((x) => (sel?.case === "pid" ? x.pid === sel.value : x.tag === sel?.value) && !x.ended);
        if (!p) throw new ConnectError("process not found", Code.NotFound);
        return this.stream(p, ctx.signal, p.events.length);
      },
      list: async () => ({ processes: [...this.procs.values()].filter((p) => !p.ended).map((p) => ({ pid: p.pid, tag: p.tag, config: { cmd: p.cmd, args: [], envs: {} } })) }),
      sendSignal: async (req) => {
        const sel = req.process?.selector;
        const p = sel?.case === "pid" ? this.procs.get(sel.value) : undefined;
        if (!p || p.ended) throw new ConnectError("process not found", Code.NotFound);
        this.end(p, -1, false, "signal: killed");
        return {};
      },
    };
    const rpc = connectNodeAdapter({ routes: (r) => r.service(Process, impl) });
    this.server = createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://envd");
      if (url.pathname !== ENDED_PROCESSES_PATH) return rpc(req, res);
      const rec = this.endedRecord(url.searchParams.get("tag") ?? "");
      res.writeHead(rec ? 200 : 404, { "content-type": "application/json" });
      res.end(JSON.stringify(rec ?? { code: 404, message: "no ended process with that tag is kept" }));
    });
    await new Promise<void>((res) => this.server!.listen(0, "127.0.0.1", res));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  /** Starts a scripted command with nobody attached (what a claimer that then died did). */
  spawn(cmd: string, args: string[], tag: string | undefined): FakeProc {
    const p: FakeProc = { pid: this.nextPid++, tag, cmd, events: [], wake: new Set(), ended: false, attached: 0, detached: [] };
    this.procs.set(p.pid, p);
    this.started.push(tag ?? cmd);
    this.run(p, cmd, args);
    return p;
  }
  private endedRecord(tag: string): EndedProcess | undefined {
    const p = [...this.procs.values()].reverse().find((x) => x.tag === tag && x.ended);
    const end = p?.events.at(-1);
    if (!p || end?.case !== "end") return undefined;
    const detached_output = p.detached.map((d) => ({ stream: d.stream, data: Buffer.from(d.data).toString("base64") }));
    return { tag, pid: p.pid, exit_code: end.exitCode, exited: end.exited, status: end.status, error: end.exitCode === 0 ? null : end.status, ended_at: new Date().toISOString(), detached_output, detached_output_dropped_bytes: 0 };
  }
  private push(p: FakeProc, ev: FakeProc["events"][number]) {
    p.events.push(ev);
    if (ev.case === "data" && p.attached === 0) p.detached.push(ev);
    for (const w of p.wake) w();
  }
  end(p: FakeProc, exitCode: number, exited: boolean, status: string) {
    if (p.ended) return;
    p.ended = true;
    this.push(p, { case: "end", exitCode, exited, status });
  }
  private run(p: FakeProc, cmd: string, args: string[]) {
    const out = (s: string) => this.push(p, { case: "data", stream: "stdout", data: Buffer.from(s) });
    setImmediate(() => {
      switch (cmd) {
        case "echo":
          out(args.join(" ") + "\n");
          return this.end(p, 0, true, "exit status 0");
        case "true":
          return this.end(p, 0, true, "exit status 0");
        case "false":
          this.push(p, { case: "data", stream: "stderr", data: Buffer.from("failing\n") });
          return this.end(p, 1, true, "exit status 1");
        case "spew": {
          const n = Number(args[0] ?? 10);
          for (let i = 0; i < n; i++) out(`${String(i).padStart(6, "0")} ${"x".repeat(1016)}\n`);
          return this.end(p, 0, true, "exit status 0");
        }
        case "sleep":
        case "fail-stream": {
          const t = setTimeout(() => {
            out("slept\n");
            this.end(p, 0, true, "exit status 0");
          }, Number(args[0] ?? 0.2) * 1000);
          t.unref();
          return;
        }
      }
    });
  }
  private async *stream(p: FakeProc, signal: AbortSignal, from = 0) {
    p.attached++;
    try {
      yield* this.events(p, signal, from);
    } finally {
      p.attached--;
    }
  }
  private async *events(p: FakeProc, signal: AbortSignal, from: number) {
    yield { event: { event: { case: "start" as const, value: { pid: p.pid } } } };
    let i = from;
    for (;;) {
      while (i < p.events.length) {
        const ev = p.events[i++]!;
        if (ev.case === "data") yield { event: { event: { case: "data" as const, value: { output: { case: ev.stream, value: ev.data } } } } };
        else {
          yield { event: { event: { case: "end" as const, value: { exitCode: ev.exitCode, exited: ev.exited, status: ev.status } } } };
          return;
        }
      }
      if (this.breakOnce.delete(String(p.pid))) throw new ConnectError("stream reset by the data plane", Code.Unavailable);
      await new Promise<void>((res) => {
        const w = () => {
          p.wake.delete(w);
          res();
        };
        p.wake.add(w);
        signal.addEventListener("abort", w, { once: true });
      });
      if (signal.aborted) return;
    }
  }
  async close() {
    await new Promise<void>((res) => this.server?.close(() => res()) ?? res());
    this.server?.closeAllConnections();
  }
}

export interface Harness {
  engine: Engine;
  t: TestDb;
  db: Db;
  app: FastifyInstance;
  sandboxes: SandboxService;
  substrate: EnvdFakeSubstrate;
  envd: FakeEnvd;
  tenantA: Tenant;
  tenantB: Tenant;
  /** Bearer tokens: a/b = every tenant scope of A/B; readOnly = A with sandboxes:read. */
  tokens: { a: string; b: string; readOnly: string; noExec: string };
  dispatcher: Dispatcher | undefined;
  /** Starts (another) dispatcher on this database. */
  startDispatcher(o?: { handlers?: HandlerMap; staleMs?: number; db?: Db; workerId?: string }): Promise<Dispatcher>;
  req(method: string, url: string, o?: { token?: string; body?: unknown; key?: string }): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  /** GET /v1/operations/:id?wait until it ends. */
  waitOp(id: string, token?: string): Promise<any>;
  close(): Promise<void>;
}

export async function startHarness(engine: Engine, o: { dispatcher?: boolean; handlers?: HandlerMap } = {}): Promise<Harness> {
  const t = await freshDb(engine);
  const db = t.db;
  const tenantA = await createTenant(db, { name: "tenant-a" });
  const tenantB = await createTenant(db, { name: "tenant-b" });
  const tokens = {
    a: (await createToken(db, { tenantId: tenantA.id, scopes: ALL_SCOPES })).plaintext,
    b: (await createToken(db, { tenantId: tenantB.id, scopes: ALL_SCOPES })).plaintext,
    readOnly: (await createToken(db, { tenantId: tenantA.id, scopes: ["sandboxes:read"] })).plaintext,
    noExec: (await createToken(db, { tenantId: tenantA.id, scopes: ["sandboxes:read", "sandboxes:write"] })).plaintext,
  };
  await registerNode(db, {
    id: "00000000-0000-4000-8000-000000000001" as NodeId,
    name: "n1",
    address: "http://127.0.0.1:9",
    capacity: { networkSlots: 1000, memoryMib: 1 << 20, vcpu: 256, diskMib: 1 << 30 },
    templates: [{ templateId: "base", rootfsSizeMib: 300, environment: "e" }],
  });
  const envd = new FakeEnvd();
  const substrate = new EnvdFakeSubstrate();
  substrate.envdUrl = await envd.listen();
  const { sandboxes } = createSandboxLayer({ db, log, defaults: { vcpu: 1, memoryMib: 256, diskMib: 1024 }, substrate });
  const app = await createApiApp({
    db,
    log,
    metrics: new Registry(),
    surfaces: [(app) => registerNativeRoutes(app, { db, sandboxes, log, authenticate: (req) => authenticateBearer(db, bearerOf(req), "admin-token-for-tests-0000") })],
  });
  const dispatchers: Dispatcher[] = [];
  const h: Harness = {
    engine,
    t,
    db,
    app,
    sandboxes,
    substrate,
    envd,
    tenantA,
    tenantB,
    tokens,
    dispatcher: undefined,
    async startDispatcher(x = {}) {
      const d = await startDispatcher({
        db: x.db ?? db,
        log,
        config: { SPACE_CONTROLLER_TICK_MS: 25, SPACE_CONTROLLER_CLAIM_LIMIT: 16, SPACE_CONTROLLER_CLAIM_STALE_MS: x.staleMs ?? 60_000 },
        sandboxes,
        ...(x.handlers ? { handlers: x.handlers } : {}),
        ...(x.workerId ? { workerId: x.workerId } : {}),
      });
      dispatchers.push(d);
      return d;
    },
    async req(method, url, r = {}) {
      const res = await app.inject({
        method: method as "GET",
        url,
        headers: {
          ...(r.token !== "" ? { authorization: `Bearer ${r.token ?? tokens.a}` } : {}),
          ...(r.key ? { "idempotency-key": r.key } : {}),
          ...(r.body !== undefined ? { "content-type": "application/json" } : {}),
        },
        ...(r.body !== undefined ? { payload: JSON.stringify(r.body) } : {}),
      });
      let body: unknown = res.body;
      try {
        body = JSON.parse(res.body);
      } catch {
        /* NDJSON or empty */
      }
      return { status: res.statusCode, body, headers: res.headers };
    },
    async waitOp(id, token) {
      for (let i = 0; i < 20; i++) {
        const r = await h.req("GET", `/v1/operations/${id}?wait=10s`, { token: token ?? tokens.a });
        if (r.status !== 200) throw new Error(`GET operation ${id}: ${r.status} ${JSON.stringify(r.body)}`);
        if (r.body.state === "succeeded" || r.body.state === "failed") return r.body;
      }
      throw new Error(`operation ${id} did not end`);
    },
    async close() {
      for (const d of dispatchers) await d.stop();
      await app.close();
      await envd.close();
      await t.drop();
    },
  };
  if (o.dispatcher !== false) h.dispatcher = await h.startDispatcher(o.handlers ? { handlers: o.handlers } : {});
  return h;
}

/** Creates a running sandbox through the API; returns its id. */
export async function createSandbox(h: Harness, body: Record<string, unknown> = {}, token?: string): Promise<string> {
  const r = await h.req("POST", "/v1/sandboxes", { body: { template: "base", ...body }, ...(token ? { token } : {}) });
  if (r.status !== 202) throw new Error(`create: ${r.status} ${JSON.stringify(r.body)}`);
  const op = await h.waitOp(r.body.id, token);
  if (op.state !== "succeeded") throw new Error(`create failed: ${JSON.stringify(op.failure)}`);
  return op.result.id;
}
