/**
 * Area d, faults: `kill -9` of `space up` in the middle of Native creates, commands and
 * pauses (each sent with an Idempotency-Key), a restart on the same data directory, the
 * same request replayed. Counts, per round: records that did not reach a stable state
 * consistent with the node (running ⇔ a container) within 10 s of the restart;
 * operations lost (never finished after the replay) or run twice (two sandboxes carrying
 * one key; a command's side effect written twice); crashes (an exit the review did not
 * cause). The area's leaks are counted by the caller after kill-all and stop.
 */
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { call, shell, waitOperation } from "./clients.ts";
import { Tally, type AreaResult } from "./report.ts";
import type { ReviewStack } from "./review-stack.ts";

const STABLE = ["running", "paused", "suspended", "stopped", "killed", "failed"];

export interface FaultOptions {
  rounds: number;
  /** Every sandbox id the area touches (for the leak count). */
  ids: Set<string>;
}

export async function faults(stack: ReviewStack, o: FaultOptions): Promise<AreaResult> {
  const started = Date.now();
  const t = new Tally();
  t.measure("tried", "unconverged", "lost", "twice", "crashes");
  const containers = () => spawnSync("runc", ["--root", stack.stateDir, "list", "-q"], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
  const nap = (ms: number) => new Promise((r) => setTimeout(r, ms));
  /** kill -9 after a random part of `windowMs`, restart, then the convergence check of `ids`. */
  const crashAndRestart = async (windowMs: number, ids: string[], what: string) => {
    await nap(Math.floor(Math.random() * windowMs));
    await stack.stop("SIGKILL");
    await stack.up();
    const end = Date.now() + 10_000;
    let last = "";
    for (;;) {
      const bad: string[] = [];
      const live = containers();
      for (const id of ids) {
        const r = await call(stack.ep, "GET", `/v1/sandboxes/${id}`, { bearer: stack.ep.apiKey });
        const state = r.status === 404 ? "gone" : String(r.body.state);
        const ok = state === "gone" || (STABLE.includes(state) && (state === "running") === live.includes(id)) || (state === "paused" && live.includes(id));
        if (!ok) bad.push(`${id} ${state} (container ${live.includes(id) ? "present" : "absent"})`);
      }
      if (!bad.length) return;
      last = bad.join("; ");
      if (Date.now() > end) return t.find("unconverged", `${what}: after the restart, not converged in 10 s: ${last}`);
      await nap(250);
    }
  };
  const bearer = () => ({ bearer: stack.ep.apiKey });

  for (let i = 0; i < o.rounds; i++) {
    // A create.
    const key = `review-create-${randomBytes(6).toString("hex")}`;
    const body = { template: "base", timeout_s: 600, metadata: { review_key: key } };
    const first = await call(stack.ep, "POST", "/v1/sandboxes", { ...bearer(), key, body });
    t.add("tried");
    const target = String(first.body.target ?? "").split("/").pop() ?? "";
    if (target) o.ids.add(target);
    await crashAndRestart(2500, target ? [target] : [], `create round ${i + 1}`);
    await replayAndCount(t, stack, "POST", "/v1/sandboxes", key, body, String(first.body.id), `create round ${i + 1}`);
    const sameKey = await liveWithKey(stack, key);
    for (const id of sameKey) o.ids.add(id);
    if (sameKey.length > 1) t.find("twice", `create round ${i + 1}: ${sameKey.length} sandboxes carry key ${key}: ${sameKey.join(", ")}`);
  }

  const host = await call(stack.ep, "POST", "/v1/sandboxes", { ...bearer(), body: { template: "base", timeout_s: 1800 } });
  const hostOp = await waitOperation(stack.ep, stack.ep.apiKey, host.body.id);
  const sid = String(hostOp.result?.id ?? "");
  if (!sid) throw new Error(`the fault area's sandbox: ${JSON.stringify(hostOp).slice(0, 300)}`);
  o.ids.add(sid);
  for (let i = 0; i < o.rounds; i++) {
    // A command whose side effect says how often it ran.
    const key = `review-cmd-${randomBytes(6).toString("hex")}`;
    const body = { cmd: "/bin/sh", args: ["-c", `echo ran >> /tmp/${key}; sleep 1`] };
    const first = await call(stack.ep, "POST", `/v1/sandboxes/${sid}/commands`, { ...bearer(), key, body });
    t.add("tried");
    await crashAndRestart(1500, [sid], `command round ${i + 1}`);
    const op = await replayAndCount(t, stack, "POST", `/v1/sandboxes/${sid}/commands`, key, body, String(first.body.id), `command round ${i + 1}`);
    const runs = (await shell(stack.ep, sid, `cat /tmp/${key} 2>/dev/null | wc -l`).catch((e: Error) => ({ out: `?${e.message}` }))).out.trim();
    if (Number(runs) > 1) t.find("twice", `command round ${i + 1}: key ${key} ran ${runs} times`);
    if (op?.state === "succeeded" && runs === "0") t.find("lost", `command round ${i + 1}: succeeded but never ran`);
  }

  for (let i = 0; i < o.rounds; i++) {
    // A pause (and the resume that brings it back for the next round).
    const key = `review-pause-${randomBytes(6).toString("hex")}`;
    const first = await call(stack.ep, "POST", `/v1/sandboxes/${sid}/pause`, { ...bearer(), key, body: {} });
    t.add("tried");
    await crashAndRestart(1500, [sid], `pause round ${i + 1}`);
    await replayAndCount(t, stack, "POST", `/v1/sandboxes/${sid}/pause`, key, {}, String(first.body.id), `pause round ${i + 1}`);
    const resumed = await call(stack.ep, "POST", `/v1/sandboxes/${sid}/resume`, { ...bearer(), body: {} });
    if (resumed.status === 202) await waitOperation(stack.ep, stack.ep.apiKey, resumed.body.id).catch(() => undefined);
    const alive = await shell(stack.ep, sid, "echo alive").catch((e: Error) => ({ out: e.message }));
    if (alive.out.trim() !== "alive") t.findings.push(`pause round ${i + 1}: after resume the sandbox answers ${alive.out.slice(0, 120)}`);
  }
  for (const c of stack.crashes.splice(0)) t.find("crashes", c);
  return t.result("faults", "d. kill -9 faults", started);
}

/** Replays the request with its key: it must name the first operation, which must end within 60 s. */
async function replayAndCount(t: Tally, stack: ReviewStack, method: string, path: string, key: string, body: unknown, firstOp: string, what: string) {
  const r = await call(stack.ep, method, path, { bearer: stack.ep.apiKey, key, body });
  if (r.status !== 202) {
    t.find("lost", `${what}: the replay answered ${r.status} ${r.text.slice(0, 160)}`);
    return undefined;
  }
  if (firstOp !== "undefined" && r.body.id !== firstOp) t.find("twice", `${what}: the replay made operation ${r.body.id}, not ${firstOp}`);
  try {
    return await waitOperation(stack.ep, stack.ep.apiKey, String(r.body.id), 60_000);
  } catch (e) {
    t.find("lost", `${what}: ${(e as Error).message}`);
    return undefined;
  }
}

async function liveWithKey(stack: ReviewStack, key: string): Promise<string[]> {
  const ids: string[] = [];
  for (let cursor = ""; ; ) {
    const r = await call(stack.ep, "GET", `/v1/sandboxes?limit=100${cursor ? `&cursor=${cursor}` : ""}`, { bearer: stack.ep.apiKey });
    for (const s of r.body.sandboxes as Array<{ id: string; metadata: Record<string, string> }>) if (s.metadata.review_key === key) ids.push(s.id);
    if (!r.body.next_cursor) return ids;
    cursor = encodeURIComponent(r.body.next_cursor);
  }
}
