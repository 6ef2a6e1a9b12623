/**
 * What one review area counted, and the one table (or JSON document) `npm run review`
 * prints. A count the area does not measure is absent (printed "-"), never 0: a 0 claims
 * the area looked. Every finding is a line naming the input and what came back, so a run
 * that finds something says what to turn into a regression test.
 */
import Table from "cli-table3";

export const COLUMNS = {
  tried: "inputs / probes",
  serverErrors: "5xx",
  leakedText: "internal text",
  notRefused: "not refused",
  crashes: "crashes",
  unconverged: "not converged (10 s)",
  lost: "ops lost",
  twice: "ops run twice",
  leaks: "host leaks",
} as const;
export type Column = keyof typeof COLUMNS;

export interface AreaResult {
  area: string;
  title: string;
  counts: Partial<Record<Column, number>>;
  findings: string[];
  durationMs: number;
}

/** The columns whose count must be 0 for a clean run (everything but `tried`). */
export const BAD: readonly Column[] = (Object.keys(COLUMNS) as Column[]).filter((c) => c !== "tried");

export function isClean(r: AreaResult): boolean {
  return BAD.every((c) => !r.counts[c]) && r.findings.length === 0;
}

export function renderTable(results: AreaResult[]): string {
  const cols = Object.keys(COLUMNS) as Column[];
  const t = new Table({ head: ["area", ...cols.map((c) => COLUMNS[c]), "s"], style: { head: [], border: [] } });
  for (const r of results) t.push([r.title, ...cols.map((c) => (r.counts[c] === undefined ? "-" : String(r.counts[c]))), (r.durationMs / 1000).toFixed(0)]);
  const lines = [t.toString()];
  for (const r of results) for (const f of r.findings) lines.push(`finding (${r.area}): ${f}`);
  return lines.join("\n");
}

/** Counts findings by kind while an area runs; caps the lines kept so a flood stays readable. */
export class Tally {
  readonly counts: Partial<Record<Column, number>> = {};
  readonly findings: string[] = [];
  #dropped = 0;

  add(c: Column, n = 1): void {
    this.counts[c] = (this.counts[c] ?? 0) + n;
  }
  /** Declares a column measured (0 until something is added). */
  measure(...cs: Column[]): void {
    for (const c of cs) this.counts[c] ??= 0;
  }
  find(c: Column, line: string): void {
    this.add(c);
    if (this.findings.length < 40) this.findings.push(line.slice(0, 400));
    else this.#dropped++;
  }
  result(area: string, title: string, startedAt: number): AreaResult {
    const findings = this.#dropped ? [...this.findings, `… and ${this.#dropped} more`] : this.findings;
    return { area, title, counts: this.counts, findings, durationMs: Date.now() - startedAt };
  }
}
