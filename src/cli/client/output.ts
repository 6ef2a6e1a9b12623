/**
 * What client commands print. `--json`: parseable JSON only, on stdout, nothing else there.
 * Otherwise tables and summaries for people; spinners and progress bars on stderr, and
 * only when stderr is a terminal (a pipe or a log file gets no control characters).
 */
import Table from "cli-table3";
import ora, { type Ora } from "ora";

export interface Out {
  json: boolean;
  /** stderr is a terminal and --json is off: spinners and bars may draw. */
  interactive: boolean;
}

export function outOf(json: boolean): Out {
  return { json, interactive: !json && process.stderr.isTTY === true };
}

export function printJson(v: unknown): void {
  process.stdout.write(`${JSON.stringify(v, null, 2)}\n`);
}

export function printLine(text: string): void {
  process.stdout.write(`${text}\n`);
}

type Cell = string | number | boolean | null | undefined;

/** A table for people; an empty list says so in words. */
export function printTable(head: string[], rows: Cell[][], empty = "(none)"): void {
  if (rows.length === 0) {
    printLine(empty);
    return;
  }
  const t = new Table({ head, chars: { mid: "", "left-mid": "", "mid-mid": "", "right-mid": "" }, style: { head: process.stdout.isTTY ? ["cyan"] : [], border: process.stdout.isTTY ? ["grey"] : [] } });
  for (const r of rows) t.push(r.map((c) => (c === null || c === undefined ? "-" : String(c))));
  printLine(t.toString());
}

/** `key: value` lines for one object (nested values as JSON). */
export function printFields(o: Record<string, unknown>): void {
  const width = Math.max(...Object.keys(o).map((k) => k.length));
  for (const [k, v] of Object.entries(o)) {
    const text = v === null || v === undefined ? "-" : typeof v === "object" ? JSON.stringify(v) : String(v);
    printLine(`${`${k}:`.padEnd(width + 2)}${text}`);
  }
}

/** Runs `work` under a spinner (interactive only); the spinner ends with ✔ or ✖. */
export async function withSpinner<T>(out: Out, text: string, work: (s: Ora | undefined) => Promise<T>): Promise<T> {
  if (!out.interactive) return work(undefined);
  const s = ora({ text, stream: process.stderr }).start();
  try {
    const r = await work(s);
    s.succeed();
    return r;
  } catch (e) {
    s.fail();
    throw e;
  }
}
