// A node:test reporter that counts passed, failed and skipped tests per lane
// (scripts/test-lanes.mjs) and writes them as JSON to its destination.
import { relative } from "node:path";
import { laneOf } from "./test-lanes.mjs";

export default async function* lanes(source) {
  const counts = {};
  const stacks = new Map();
  for await (const event of source) {
    const { type, data } = event;
    if (!data?.file || (type !== "test:start" && type !== "test:pass" && type !== "test:fail")) continue;
    const stack = stacks.get(data.file) ?? [];
    stacks.set(data.file, stack);
    if (type === "test:start") {
      stack[data.nesting] = data.name;
      stack.length = data.nesting + 1;
      continue;
    }
    const names = [...stack.slice(0, data.nesting), data.name];
    const lane = names.some((n) => /\bpostgres\b/i.test(n)) ? "postgres" : laneOf(relative(process.cwd(), data.file));
    const c = (counts[lane] ??= { pass: 0, fail: 0, skip: 0, reasons: [] });
    const isSuite = data.details?.type === "suite";
    if (data.skip !== undefined && data.skip !== false) {
      const why = `${names.join(" > ")}${typeof data.skip === "string" ? `: ${data.skip}` : ""}`;
      if (!isSuite || !c.reasons.some((r) => r.startsWith(names.join(" > ")))) c.skip++;
      if (c.reasons.length < 50) c.reasons.push(why);
    } else if (isSuite) {
      // A suite's outcome is its tests'; a suite that failed outside them (a hook) counts once.
      if (type === "test:fail" && data.details?.error?.failureType !== "subtestsFailed") c.fail++;
    } else if (type === "test:pass") c.pass++;
    else c.fail++;
  }
  yield JSON.stringify(counts);
}
