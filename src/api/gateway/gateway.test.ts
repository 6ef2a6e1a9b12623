import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { pino } from "pino";
import { EventEmitter } from "node:events";
import { createGateway, type LocalNode } from "./gateway.ts";
import { SpaceError } from "../../core/errors.ts";
import { resolveRoute } from "./route.ts";
import { fileSignature } from "./signature.ts";
import { SandboxService, type CreateInput } from "../../sandboxes/service.ts";
import { MemorySandboxRepo, MemoryTemplates } from "../../sandboxes/memory-repo.ts";
import { FakeSubstrate } from "../../substrate/fake-substrate.ts";
import type { TenantId } from "../../core/ids.ts";

const input = (o: Partial<CreateInput> = {}): CreateInput => ({
  template: "base", metadata: {}, envVars: {}, timeoutSec: 300, secure: true, allowInternetAccess: true,
  network: null, onTimeout: "kill", autoResume: false, resources: {}, ...o,
});

test("route resolution", () => {
  const id = "abcdefghij0123456789";
  assert.deepEqual(resolveRoute({ "e2b-sandbox-id": id, "e2b-sandbox-port": "49983" }, "/health", null), { kind: "header", sandboxId: id, port: 49983, path: "/health" });
  assert.deepEqual(resolveRoute({ host: `8080-${id}.sb.local:3001` }, "/x?y=1", "sb.local"), { kind: "host", sandboxId: id, port: 8080, path: "/x?y=1" });
  assert.equal(resolveRoute({ host: `8080-${id}.other.dom` }, "/x", "sb.local").kind, "none");
  assert.deepEqual(resolveRoute({ host: `8000-${id}.localhost:3001` }, "/", "localhost:3001"), { kind: "host", sandboxId: id, port: 8000, path: "/" });
  assert.deepEqual(resolveRoute({ host: "127.0.0.1:3001" }, `/sandboxes/${id}/ports/3000/a/b?c=d`, null), { kind: "path", sandboxId: id, port: 3000, path: "/a/b?c=d" });
  assert.deepEqual(resolveRoute({}, `/sandboxes/${id}/ports/3000`, null), { kind: "path", sandboxId: id, port: 3000, path: "/" });
  assert.equal(resolveRoute({}, "/files?path=x&signature=v1_abc", null).kind, "signed");
  assert.equal(resolveRoute({}, "/files?path=x", null).kind, "none");
  assert.deepEqual(resolveRoute({ "x-access-token": "tok" }, "/process.Process/List", null), { kind: "token", token: "tok", path: "/process.Process/List" });
  assert.equal(resolveRoute({ "e2b-sandbox-id": id, "e2b-sandbox-port": "99999" }, "/", null).kind, "none");
});

async function setup(opts: { localNode?: (nodePort: number) => LocalNode } = {}) {
  // A stand-in for the node's proxy route: echoes what it got; /stream streams forever.
  const seen: Array<{ url: string; headers: http.IncomingHttpHeaders; body: string }> = [];
  const node = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ url: req.url!, headers: req.headers, body });
      if (req.url!.endsWith("/stream")) {
        res.writeHead(200, { "content-type": "application/connect+json" });
        res.write("first");
        const t = setInterval(() => res.write("."), 50);
        res.on("close", () => clearInterval(t));
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ url: req.url, body }));
    });
  });
  // WebSocket-style upgrades: answer 101 and echo what comes.
  node.on("upgrade", (_req, socket: Duplex) => {
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    socket.pipe(socket);
  });
  // Connections the stand-in accepted, and those still open.
  const conns = { accepted: 0, open: new Set<Duplex>() };
  node.on("connection", (c: Duplex) => {
    conns.accepted++;
    conns.open.add(c);
    c.on("close", () => conns.open.delete(c));
  });
  await new Promise<void>((r) => node.listen(0, "127.0.0.1", r));
  const substrate = new FakeSubstrate();
  substrate.proxyBase = `http://127.0.0.1:${(node.address() as AddressInfo).port}`;
  const repo = new MemorySandboxRepo();
  const sandboxes = new SandboxService({ repo, templates: new MemoryTemplates(), substrate, defaults: { vcpu: 1, memoryMib: 256, diskMib: 1024 }, log: pino({ level: "silent" }) });
  const nodePort = (node.address() as AddressInfo).port;
  const gw = createGateway({ sandboxes, sandboxDomain: null, log: pino({ level: "silent" }), ...(opts.localNode ? { localNode: opts.localNode(nodePort) } : {}) });
  const port = await gw.listen(0, "127.0.0.1");
  const base = `http://127.0.0.1:${port}`;
  return {
    sandboxes, seen, base, conns,
    async close() {
      await gw.close();
      node.closeAllConnections();
      await new Promise((r) => node.close(r));
    },
  };
}

/** A gateway whose own node is the stand-in once `own` names it (until then, every sandbox's node is another's). */
async function setupLocal() {
  let nodeId: string | undefined;
  const s = await setup({ localNode: (port) => ({ nodeId: () => nodeId, target: () => ({ host: "127.0.0.1", port }), onDead: () => () => {} }) });
  return {
    ...s,
    own(id: string) {
      nodeId = id;
    },
  };
}

test("gateway forwards by header with the node token, client auth untouched; 502 for unknown", async () => {
  const s = await setup();
  try {
    const sb = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const r = await fetch(`${s.base}/process.Process/List?x=1`, {
      method: "POST",
      headers: { "e2b-sandbox-id": sb.id, "e2b-sandbox-port": "49983", authorization: "Basic dXNlcjo=", "content-type": "application/json" },
      body: "{}",
    });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), { url: `/v1/sandboxes/${sb.id}/proxy/49983/process.Process/List?x=1`, body: "{}" });
    const got = s.seen.at(-1)!;
    assert.equal(got.headers["x-space-node-token"], "internal");
    assert.equal(got.headers.authorization, "Basic dXNlcjo=");
    const u = await fetch(`${s.base}/health`, { headers: { "e2b-sandbox-id": "zzzzzzzzzzzzzzzzzzzz", "e2b-sandbox-port": "49983" } });
    assert.equal(u.status, 502);
    assert.deepEqual(await u.json(), { message: "The sandbox was not found", sandboxId: "zzzzzzzzzzzzzzzzzzzz", code: 502 });
    assert.equal(u.headers.get("access-control-allow-origin"), null, "no Origin, no CORS");
    // A page's request (it sends Origin) can read the gateway's own refusal, on any port.
    for (const port of ["49983", "8080"]) {
      const fromPage = await fetch(`${s.base}/x`, { headers: { origin: "http://dashboard.test", "e2b-sandbox-id": "zzzzzzzzzzzzzzzzzzzz", "e2b-sandbox-port": port } });
      assert.equal(fromPage.status, 502);
      assert.equal(fromPage.headers.get("access-control-allow-origin"), "*", port);
      await fromPage.body?.cancel();
    }
    const unrouted = await fetch(`${s.base}/x`, { headers: { origin: "http://dashboard.test" } });
    assert.equal(unrouted.status, 400);
    assert.equal(unrouted.headers.get("access-control-allow-origin"), "*");
    await unrouted.body?.cancel();
    const p = await fetch(`${s.base}/sandboxes/${sb.id}/ports/8080/hello?q=1`);
    assert.deepEqual(await p.json(), { url: `/v1/sandboxes/${sb.id}/proxy/8080/hello?q=1`, body: "" });
  } finally {
    await s.close();
  }
});

test("a sandbox on the gateway's own node: straight to its address, no node token; cut when the node says it died; 502 once not running", async () => {
  const dead = new EventEmitter();
  const running = new Set<string>();
  let nodeId: string | undefined;
  const s = await setup({
    localNode: (port) => ({
      nodeId: () => nodeId,
      target(id) {
        if (!running.has(id)) throw new SpaceError("failed_precondition", `sandbox ${id} is paused, not running`);
        return { host: "127.0.0.1", port };
      },
      onDead(id, fn) {
        dead.once(id, fn);
        return () => dead.off(id, fn);
      },
    }),
  });
  try {
    const sb = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    nodeId = sb.nodeId!;
    running.add(sb.id);
    const h = { "e2b-sandbox-id": sb.id, "e2b-sandbox-port": "49983", authorization: "Basic dXNlcjo=" };
    const r = await fetch(`${s.base}/process.Process/List?x=1`, { method: "POST", headers: h, body: "{}" });
    assert.deepEqual(await r.json(), { url: "/process.Process/List?x=1", body: "{}" }, "the sandbox's own path: no node proxy route");
    const got = s.seen.at(-1)!;
    assert.equal(got.headers["x-space-node-token"], undefined, "the node's token never goes to a sandbox");
    assert.equal(got.headers.authorization, "Basic dXNlcjo=");

    const stream = await fetch(`${s.base}/stream`, { headers: h });
    const reader = stream.body!.getReader();
    assert.equal(Buffer.from((await reader.read()).value!).toString().startsWith("first"), true);
    dead.emit(sb.id);
    await assert.rejects(async () => {
      for (;;) if ((await reader.read()).done) throw new Error("ended cleanly");
    });
    assert.equal(dead.listenerCount(sb.id), 0, "a finished request leaves no listener behind");

    running.delete(sb.id);
    const gone = await fetch(`${s.base}/health`, { headers: h });
    assert.equal(gone.status, 502);
    assert.deepEqual(await gone.json(), { message: "The sandbox was not found", sandboxId: sb.id, code: 502 });

    // Another node's sandbox still goes through that node's proxy.
    nodeId = "elsewhere";
    running.add(sb.id);
    const via = await fetch(`${s.base}/x`, { headers: h });
    assert.deepEqual(await via.json(), { url: `/v1/sandboxes/${sb.id}/proxy/49983/x`, body: "" });
  } finally {
    await s.close();
  }
});

test("into a local sandbox, envd calls keep one connection per sandbox, never shared, dropped when it ends; its own ports get one per request", async () => {
  const s = await setupLocal();
  try {
    const a = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const b = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    s.own(a.nodeId!);
    const call = async (id: string, port = "49983") => {
      const r = await fetch(`${s.base}/process.Process/List`, { method: "POST", headers: { "e2b-sandbox-id": id, "e2b-sandbox-port": port }, body: "{}" });
      assert.equal(r.status, 200);
      await r.arrayBuffer();
    };
    for (let i = 0; i < 3; i++) await call(a.id);
    assert.equal(s.conns.accepted, 1, "three calls into one sandbox's envd, one connection");
    await call(b.id);
    assert.equal(s.conns.accepted, 2, "another sandbox at the same address gets its own");
    s.sandboxes.events.emit("ended", a.id);
    for (let i = 0; s.conns.open.size !== 1; i++) {
      assert.ok(i < 100, `the ended sandbox's connection is closed (open: ${s.conns.open.size})`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await call(b.id);
    assert.equal(s.conns.accepted, 2, "the other's is still kept");
    await call(a.id, "8080");
    await call(a.id, "8080");
    assert.equal(s.conns.accepted, 4, "a sandbox's own port: a connection per request");
  } finally {
    await s.close();
  }
});

test("a local sandbox that starts has its envd connection opened before its first call, which uses it; nothing is sent on it ahead", async () => {
  const s = await setupLocal();
  const waitAccepted = async (n: number, what: string) => {
    for (let i = 0; s.conns.accepted < n; i++) {
      assert.ok(i < 100, what);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    // Started before the gateway knew its node as its own: no connection opened for it.
    const other = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    s.own(other.nodeId!);
    assert.equal(s.conns.accepted, 0);
    const a = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    await waitAccepted(1, "the start opened a connection into envd");
    assert.equal(s.seen.length, 0, "no request was made on it");
    const r = await fetch(`${s.base}/process.Process/List`, { method: "POST", headers: { "e2b-sandbox-id": a.id, "e2b-sandbox-port": "49983" }, body: "{}" });
    assert.equal(r.status, 200);
    await r.arrayBuffer();
    assert.equal(s.conns.accepted, 1, "the first call went over the connection opened at the start");
    // Started again (a hand-over) with its connection open: no second one.
    s.sandboxes.events.emit("started", (await s.sandboxes.repo.getById(a.id))!);
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(s.conns.accepted, 1);
    // A call that comes while the start's connection is still opening takes it.
    const b = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const rb = await fetch(`${s.base}/process.Process/List`, { method: "POST", headers: { "e2b-sandbox-id": b.id, "e2b-sandbox-port": "49983" }, body: "{}" });
    assert.equal(rb.status, 200);
    await rb.arrayBuffer();
    assert.equal(s.conns.accepted, 2, "the call went over the connection its start opened");
    assert.deepEqual(s.seen.map((x) => x.url), ["/process.Process/List", "/process.Process/List"]);
  } finally {
    await s.close();
  }
});

test("signed file URL without routing header finds its sandbox by signature", async () => {
  const s = await setup();
  try {
    await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const sb = await s.sandboxes.create("tn_b" as TenantId, input(), AbortSignal.timeout(5000));
    const sig = fileSignature("/home/user/a.txt", "read", "undefined", sb.envdAccessToken!);
    const r = await fetch(`${s.base}/files?path=${encodeURIComponent("/home/user/a.txt")}&signature=${encodeURIComponent(sig)}`);
    assert.equal(r.status, 200);
    assert.match(((await r.json()) as { url: string }).url, new RegExp(`^/v1/sandboxes/${sb.id}/proxy/49983/files\\?`));
    const bad = await fetch(`${s.base}/files?path=x&signature=v1_nope`);
    assert.equal(bad.status, 401);
  } finally {
    await s.close();
  }
});

test("envd call with only X-Access-Token goes to the sandbox owning that token", async () => {
  const s = await setup();
  try {
    await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const sb = await s.sandboxes.create("tn_b" as TenantId, input(), AbortSignal.timeout(5000));
    const r = await fetch(`${s.base}/process.Process/List`, { method: "POST", headers: { "x-access-token": sb.envdAccessToken! } });
    assert.equal(r.status, 200);
    assert.match(((await r.json()) as { url: string }).url, new RegExp(`^/v1/sandboxes/${sb.id}/proxy/49983/process.Process/List$`));
    const bad = await fetch(`${s.base}/process.Process/List`, { method: "POST", headers: { "x-access-token": "nope" } });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { message: string }).message, /no running sandbox has this X-Access-Token/);
  } finally {
    await s.close();
  }
});

test("public port needs the traffic token when allowPublicTraffic is false", async () => {
  const s = await setup();
  try {
    const sb = await s.sandboxes.create("tn_a" as TenantId, input({ network: { allowPublicTraffic: false } }), AbortSignal.timeout(5000));
    const no = await fetch(`${s.base}/`, { headers: { "e2b-sandbox-id": sb.id, "e2b-sandbox-port": "8080" } });
    assert.equal(no.status, 403);
    const yes = await fetch(`${s.base}/`, { headers: { "e2b-sandbox-id": sb.id, "e2b-sandbox-port": "8080", "e2b-traffic-access-token": sb.trafficAccessToken! } });
    assert.equal(yes.status, 200);
  } finally {
    await s.close();
  }
});

test("streams pass without buffering and are cut when the sandbox is killed; then 502", async () => {
  const s = await setup();
  try {
    const sb = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const h = { "e2b-sandbox-id": sb.id, "e2b-sandbox-port": "49983" };
    const r = await fetch(`${s.base}/stream`, { headers: h });
    const reader = r.body!.getReader();
    const firstChunk = await reader.read();
    assert.equal(Buffer.from(firstChunk.value!).toString().startsWith("first"), true);
    await s.sandboxes.kill("tn_a" as TenantId, sb.id);
    await assert.rejects(async () => {
      for (;;) {
        const c = await reader.read();
        if (c.done) throw new Error("ended cleanly");
      }
    });
    const after = await fetch(`${s.base}/health`, { headers: h });
    assert.equal(after.status, 502);
  } finally {
    await s.close();
  }
});

test("h2c with prior knowledge beside HTTP/1.1 on one port; a killed sandbox's stream is reset, the session goes on", async () => {
  const s = await setup();
  const session = http2.connect(s.base);
  try {
    const a = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const b = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const call = (id: string, path: string) =>
      session.request({ ":method": "POST", ":path": path, "e2b-sandbox-id": id, "e2b-sandbox-port": "49983", "content-type": "application/json" });
    const get = (req: http2.ClientHttp2Stream) =>
      new Promise<{ status: number; body: string }>((res, rej) => {
        let status = 0;
        let body = "";
        req.on("response", (h) => (status = Number(h[":status"])));
        req.on("data", (c: Buffer) => (body += c.toString()));
        req.on("end", () => res({ status, body }));
        req.on("error", rej);
      });
    const one = call(a.id, "/process.Process/List");
    one.end("{}");
    const got = await get(one);
    assert.equal(got.status, 200);
    assert.deepEqual(JSON.parse(got.body), { url: `/v1/sandboxes/${a.id}/proxy/49983/process.Process/List`, body: "{}" });
    assert.equal(s.seen.at(-1)!.headers.host?.startsWith("127.0.0.1:"), true, "pseudo-headers stay behind; the upstream gets its own Host");

    const stream = call(a.id, "/stream");
    stream.end();
    const first = await new Promise<string>((res) => stream.once("data", (c: Buffer) => res(c.toString())));
    assert.equal(first.startsWith("first"), true);
    const reset = new Promise<number>((res) => stream.on("close", () => res(stream.rstCode ?? -1)));
    stream.on("error", () => undefined);
    await s.sandboxes.kill("tn_a" as TenantId, a.id);
    assert.equal(await reset, http2.constants.NGHTTP2_INTERNAL_ERROR);

    const other = call(b.id, "/health");
    other.end();
    assert.equal((await get(other)).status, 200, "the other sandbox's calls on the same connection go on");
    const gone = call(a.id, "/health");
    gone.end();
    assert.equal((await get(gone)).status, 502);
    const h1 = await fetch(`${s.base}/health`, { headers: { "e2b-sandbox-id": b.id, "e2b-sandbox-port": "49983" } });
    assert.equal(h1.status, 200);
  } finally {
    session.destroy();
    await s.close();
  }
});

test("upgrades (WebSocket) pass through the HTTP/1.1 side of the shared port", async () => {
  const s = await setup();
  try {
    const sb = await s.sandboxes.create("tn_a" as TenantId, input(), AbortSignal.timeout(5000));
    const req = http.request(`${s.base}/ws`, {
      headers: { connection: "Upgrade", upgrade: "websocket", "e2b-sandbox-id": sb.id, "e2b-sandbox-port": "8080" },
    });
    req.end();
    const [res, socket] = await new Promise<[http.IncomingMessage, Duplex]>((ok, fail) => {
      req.on("upgrade", (r, sock) => ok([r, sock]));
      req.on("error", fail);
    });
    assert.equal(res.statusCode, 101);
    socket.write("ping");
    const echoed = await new Promise<string>((ok) => socket.once("data", (c: Buffer) => ok(c.toString())));
    assert.equal(echoed, "ping");
    socket.destroy();
  } finally {
    await s.close();
  }
});
