/**
 * The dashboard's files (`/dashboard/…`), built by scripts/build-dashboard.mjs into
 * dist/dashboard/. A clone that has not built it yet (no dist/dashboard/index.html, or
 * sources newer than the build) builds it at the first request, once, when the build
 * script and Vite are there (`space up` from a checkout); an installed package ships it
 * built. Hashed assets are cached for good; index.html is revalidated.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".json": "application/json",
  ".woff2": "font/woff2",
  ".png": "image/png",
  ".ico": "image/x-icon",
};

/** The checkout or package root: the nearest folder up with a package.json (src/api/dashboard/ or, compiled, dist/space/). */
const REPO_DIR = ((): string => {
  let d = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(d, "package.json")) && dirname(d) !== d) d = dirname(d);
  return d;
})();

export function registerDashboardStatic(app: FastifyInstance, dir = join(REPO_DIR, "dist", "dashboard")): void {
  const root = resolve(dir);
  let building: Promise<void> | null = null;
  const ready = () => (building ??= ensureBuilt(root).finally(() => (building = null)));

  app.get("/dashboard", async (_req, reply) => reply.redirect("/dashboard/"));
  app.get("/dashboard/*", async (req, reply) => {
    const rel = (req.params as { "*": string })["*"] || "index.html";
    const file = normalize(join(root, decodeURIComponent(rel)));
    if (file !== root && !file.startsWith(root + sep)) return reply.status(404).send({ code: 404, message: `no dashboard file ${rel}`, reason: "not_found" });
    if (rel === "index.html") await ready();
    const found = await stat(file).catch(() => null);
    if (!found?.isFile()) return reply.status(404).send({ code: 404, message: `no dashboard file ${rel}`, reason: "not_found" });
    const type = TYPES[extname(file)] ?? "application/octet-stream";
    reply.header("cache-control", rel.startsWith("assets/") ? "public, max-age=31536000, immutable" : "no-cache");
    // The page holds credentials: no framing by other sites, no sniffing, no referrer leaks.
    reply.header("x-frame-options", "DENY").header("x-content-type-options", "nosniff").header("referrer-policy", "no-referrer");
    return reply.type(type).send(await readFile(file));
  });
}

/** Builds the dashboard when this is a checkout whose build is missing or stale. */
async function ensureBuilt(root: string): Promise<void> {
  const script = join(REPO_DIR, "scripts", "build-dashboard.mjs");
  if (!existsSync(script) || !existsSync(join(REPO_DIR, "node_modules", "vite"))) return;
  if (!stale(root)) return;
  await new Promise<void>((res, rej) => {
    const child = spawn(process.execPath, [script, "--if-stale"], { cwd: REPO_DIR, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    child.once("error", rej);
    child.once("exit", (code) => (code === 0 ? res() : rej(new Error(`the dashboard build failed: ${err.trim()}`))));
  });
}

/**
 * dist/dashboard/inputs.json (build-dashboard.mjs) lists the sources and folders the build
 * read and the newest mtime among them: any newer (an edit, a file added) means rebuild.
 */
function stale(root: string): boolean {
  try {
    const built = JSON.parse(readFileSync(join(root, "inputs.json"), "utf8")) as { files: string[]; newest: number };
    return built.files.some((f) => statSync(join(REPO_DIR, f)).mtimeMs > built.newest);
  } catch {
    return true;
  }
}
