/**
 * `space template build <dir> --name X`: builds a template from a Dockerfile (subset:
 * FROM, RUN, COPY, ENV, WORKDIR, USER, CMD/ENTRYPOINT as the start command, and a
 * `# space:ready <cmd>` comment as the ready check, `# space:capture` to capture the template
 * after its start command is ready) against a SPACE API, over the same
 * E2B endpoints the SDK uses (COPY contexts uploaded through the signed files URL), with
 * live logs and a progress bar on a terminal (client/build-progress.ts).
 *
 * FROM: `base` or another template name → fromTemplate; `oci-archive:<path>`,
 * `oci:<dir>[:tag]`, `docker-archive:<path>` (paths relative to <dir>) → fromImage; a
 * registry image (`docker://…`, or a reference with a '/' or a digest such as
 * `127.0.0.1:5000/team/app:v1`, `docker.io/library/python:3.12`) → fromImage as written.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { exec } from "../core/exec.ts";
import { fromHttpStatus, invalid, SpaceError } from "../core/errors.ts";
import { unreachable } from "./client/api-client.ts";
import { buildProgress } from "./client/build-progress.ts";
import { IMAGE_TRANSPORTS } from "../contract/build-recipe.ts";

export interface DockerfileStep {
  type: "RUN" | "COPY" | "ENV" | "WORKDIR" | "USER";
  args: string[];
}
export interface ParsedDockerfile {
  from: { fromTemplate?: string; fromImage?: string };
  steps: DockerfileStep[];
  startCmd?: string;
  readyCmd?: string;
  /** `# space:capture`: checkpoint the template once its start command is ready. */
  capture?: boolean;
}

/** Parses the Dockerfile subset (pure; unit-tested). Line continuations and comments handled. */
export function parseDockerfile(text: string, contextDir: string): ParsedDockerfile {
  const out: ParsedDockerfile = { from: {}, steps: [] };
  const lines: string[] = [];
  let cur = "";
  for (const raw of text.split("\n")) {
    const ready = /^\s*#\s*space:ready\s+(.+)$/.exec(raw);
    if (ready) {
      out.readyCmd = ready[1]!.trim();
      continue;
    }
    if (/^\s*#\s*space:capture\s*$/.test(raw)) {
      out.capture = true;
      continue;
    }
    if (/^\s*#/.test(raw)) continue;
    if (raw.trimEnd().endsWith("\\")) {
      cur += raw.trimEnd().slice(0, -1) + " ";
      continue;
    }
    cur += raw;
    if (cur.trim()) lines.push(cur.trim());
    cur = "";
  }
  if (cur.trim()) lines.push(cur.trim());
  for (const [i, line] of lines.entries()) {
    const m = /^(\S+)\s*(.*)$/.exec(line)!;
    const op = m[1]!.toUpperCase();
    const rest = m[2]!.trim();
    const where = `Dockerfile line ${i + 1} (${op})`;
    switch (op) {
      case "FROM": {
        const ref = rest.split(/\s+/)[0] ?? "";
        const transport = IMAGE_TRANSPORTS.find((t) => ref.startsWith(t));
        if (transport) {
          const path = ref.slice(transport.length);
          out.from = { fromImage: `${transport}${isAbsolute(path) ? path : resolve(contextDir, path)}` };
        } else if (ref.startsWith("docker://") || ref.includes("/") || ref.includes("@")) out.from = { fromImage: ref };
        else out.from = { fromTemplate: ref || "base" };
        break;
      }
      case "RUN":
        out.steps.push({ type: "RUN", args: [execForm(rest)] });
        break;
      case "COPY": {
        const parts = rest.split(/\s+/).filter((p) => !p.startsWith("--"));
        const chown = /--chown=(\S+)/.exec(rest)?.[1];
        const chmod = /--chmod=(\S+)/.exec(rest)?.[1];
        if (parts.length < 2) throw invalid(`${where}: COPY needs a source and a destination`);
        const dest = parts.pop()!;
        for (const src of parts) out.steps.push({ type: "COPY", args: [src, dest, chown ?? "", chmod ?? ""] });
        break;
      }
      case "ENV": {
        const args: string[] = [];
        if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(rest)) {
          for (const kv of rest.match(/[A-Za-z_][A-Za-z0-9_]*=("[^"]*"|'[^']*'|\S*)/g) ?? []) {
            const k = kv.slice(0, kv.indexOf("="));
            args.push(k, kv.slice(k.length + 1).replace(/^(["'])(.*)\1$/, "$2"));
          }
        } else {
          const [k, ...v] = rest.split(/\s+/);
          args.push(k!, v.join(" "));
        }
        out.steps.push({ type: "ENV", args });
        break;
      }
      case "WORKDIR":
        out.steps.push({ type: "WORKDIR", args: [rest] });
        break;
      case "USER":
        out.steps.push({ type: "USER", args: [rest] });
        break;
      case "CMD":
      case "ENTRYPOINT":
        out.startCmd = execForm(rest);
        break;
      case "ARG":
      case "LABEL":
      case "EXPOSE":
        break; // accepted, no effect on the template
      default:
        throw invalid(`${where}: unsupported instruction (supported: FROM, RUN, COPY, ENV, WORKDIR, USER, CMD, ENTRYPOINT)`);
    }
  }
  return out;
}

/** `["a","b c"]` → `a 'b c'`; shell form unchanged. */
function execForm(rest: string): string {
  if (!rest.startsWith("[")) return rest;
  try {
    const argv = JSON.parse(rest) as string[];
    return argv.map((a) => (/^[A-Za-z0-9_./:=@-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(" ");
  } catch {
    return rest;
  }
}

export interface TemplateBuildOptions {
  dir: string;
  name: string;
  apiUrl: string;
  apiKey: string;
  file?: string;
  cpuCount?: number;
  memoryMB?: number;
  force?: boolean;
  out?: NodeJS.WriteStream;
}

/** Runs a build to completion; resolves with ids, throws with the failed step's message. */
export async function runTemplateBuild(o: TemplateBuildOptions): Promise<{ templateID: string; buildID: string }> {
  const out = o.out ?? process.stderr;
  const api = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    let res: Response;
    try {
      res = await fetch(`${o.apiUrl.replace(/\/+$/, "")}${path}`, {
        method,
        headers: { "x-api-key": o.apiKey, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (e: unknown) {
      throw unreachable(o.apiUrl, e);
    }
    const text = await res.text();
    if (!res.ok) throw new SpaceError(fromHttpStatus(res.status), `${method} ${path}: ${res.status} ${text.slice(0, 500)}`);
    return (text ? JSON.parse(text) : undefined) as T;
  };
  const dir = resolve(o.dir);
  const df = parseDockerfile(await readFile(join(dir, o.file ?? "Dockerfile"), "utf8"), dir);
  const progress = buildProgress(`template ${o.name}`, out);
  try {
    progress.step("requesting a build");
    const req = await api<{ templateID: string; buildID: string }>("POST", "/v3/templates", { name: o.name, ...(o.cpuCount ? { cpuCount: o.cpuCount } : {}), ...(o.memoryMB ? { memoryMB: o.memoryMB } : {}) });
    const tmp = await mkdtemp(join(tmpdir(), "space-template-"));
    const steps: Array<DockerfileStep & { filesHash?: string }> = [];
    try {
      for (const [i, s] of df.steps.entries()) {
        if (s.type !== "COPY") {
          steps.push(s);
          continue;
        }
        progress.step(`uploading ${s.args[0]}`);
        const tar = join(tmp, `copy-${i}.tar.gz`);
        await exec("tar", ["-czf", tar, "-C", dir, "--", s.args[0]!.replace(/^\.?\/+/, "") || "."], { timeoutMs: 10 * 60_000 });
        const bytes = await readFile(tar);
        const filesHash = createHash("sha256").update(`${s.args[0]}\0${s.args[1]}\0`).update(bytes).digest("hex");
        const link = await api<{ present: boolean; url?: string }>("GET", `/templates/${req.templateID}/files/${filesHash}`);
        if (!link.present && link.url) {
          const put = await fetch(link.url, { method: "PUT", body: bytes, headers: { "content-type": "application/gzip" } });
          if (!put.ok) throw new SpaceError("unavailable", `upload of ${s.args[0]} failed: ${put.status}`);
        }
        steps.push({ ...s, filesHash });
      }
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
    progress.step("building");
    await api("POST", `/v2/templates/${req.templateID}/builds/${req.buildID}`, {
      ...df.from,
      steps,
      ...(df.startCmd ? { startCmd: df.startCmd } : {}),
      ...(df.readyCmd ? { readyCmd: df.readyCmd } : {}),
      ...(df.capture ? { captureAfterReady: true } : {}),
      force: o.force ?? false,
    });
    let offset = 0;
    for (;;) {
      const st = await api<{ status: string; logEntries: Array<{ message: string; step?: string }>; reason?: { message: string; step?: string } }>(
        "GET",
        `/templates/${req.templateID}/builds/${req.buildID}/status?logsOffset=${offset}`,
      );
      offset += st.logEntries.length;
      for (const e of st.logEntries) {
        progress.log(`[${e.step ?? "-"}] ${e.message}`);
      }
      if (st.status === "ready") {
        progress.done(`ready: template ${req.templateID}, build ${req.buildID}`);
        return req;
      }
      if (st.status === "error") throw new SpaceError("failed_precondition", `build failed at step ${st.reason?.step ?? "?"}: ${st.reason?.message ?? "unknown error"}`);
      await new Promise((r) => setTimeout(r, 300));
    }
  } catch (e) {
    progress.fail(e);
    throw e;
  }
}
