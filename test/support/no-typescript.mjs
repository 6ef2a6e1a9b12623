// `node --import` hook for the compiled CLI's suites (test/support/space-process.ts): any
// attempt to load tsx or a TypeScript file fails the process, so a passing suite proves
// the compiled build needs no TypeScript loader.
import { register } from "node:module";

register(
  "data:text/javascript," +
    encodeURIComponent(`
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  if (/^tsx(\\/|$)/.test(specifier) || /\\/node_modules\\/tsx\\//.test(r.url) || /\\.[cm]?ts$/.test(new URL(r.url).pathname))
    throw new Error("the compiled CLI loaded " + r.url + " (from " + (context.parentURL ?? "?") + ")");
  return r;
}`),
);
