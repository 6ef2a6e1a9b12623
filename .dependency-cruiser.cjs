// The dependency rule of src/ (docs/architecture.md, "Dependencies"), checked by
// `npm run lint`: each top-level folder may import only the folders listed for it, so
// the folder graph has no cycle. Contracts (src/contract) are importable by both sides
// of a process boundary and import only core.
const allowed = {
  core: [],
  gen: [],
  contract: ["core"],
  kube: ["core", "contract"],
  store: ["core", "contract"],
  blob: ["core", "contract"],
  runtime: ["core", "contract"],
  envd: ["core", "contract", "gen"],
  substrate: ["core", "contract", "kube", "store", "blob"],
  node: ["core", "contract", "kube", "blob", "runtime", "gen"],
  templates: ["core", "contract", "store", "blob", "substrate"],
  sandboxes: ["core", "contract", "store", "blob", "substrate", "templates"],
  operations: ["core", "contract", "store", "blob", "substrate", "templates", "sandboxes", "gen"],
  api: ["core", "contract", "store", "blob", "substrate", "templates", "sandboxes", "operations", "gen"],
  controller: ["core", "contract", "store", "blob", "substrate", "templates", "sandboxes", "operations", "gen"],
  cli: Object.keys({ core: 0, gen: 0, contract: 0, kube: 0, store: 0, blob: 0, runtime: 0, envd: 0, substrate: 0, node: 0, templates: 0, sandboxes: 0, operations: 0, api: 0, controller: 0 }),
};
const folders = Object.keys(allowed);

module.exports = {
  forbidden: [
    ...folders.map((from) => ({
      name: `${from}-imports`,
      comment: `src/${from}/ may import only: ${allowed[from].join(", ") || "nothing outside itself"} (docs/architecture.md)`,
      severity: "error",
      from: { path: `^src/${from}/` },
      to: { path: `^src/(?!(${[from, ...allowed[from]].join("|")})/)[^/]+/` },
    })),
    {
      name: "envd-zod-mini",
      comment: "envd, and every module it reaches, validates with zod/mini: the full zod was two thirds of envd's bundle and ~4 MB of every sandbox's envd (src/contract/envd-logs.ts)",
      severity: "error",
      from: { path: "^src/envd/" },
      to: { path: "^node_modules/zod/(?!mini/)", reachable: true },
    },
    {
      name: "unknown-folder",
      comment: "every top-level folder of src/ has a place in the dependency rule (.dependency-cruiser.cjs)",
      severity: "error",
      from: { path: `^src/(?!(${folders.join("|")})/)[^/]+/` },
      to: { path: "^src/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "\\.test\\.ts$" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
  },
};
