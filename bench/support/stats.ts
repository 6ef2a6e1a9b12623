/** The benches' one definition of a percentile (shared: each bench had its own, in two conventions). */

/** Nearest-rank percentile of `xs` (any order): the smallest value with at least `p`% of them at or below it. NaN when empty. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export const median = (xs: readonly number[]): number => percentile(xs, 50);
