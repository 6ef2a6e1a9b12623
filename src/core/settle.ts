/** Waits for every promise; then throws the first rejection (in argument order), if any. */
export async function settleAll(ps: Promise<unknown>[]): Promise<void> {
  const rs = await Promise.allSettled(ps);
  const failed = rs.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) throw failed.reason;
}
