import tseslint from "typescript-eslint";

// SQL lives only in src/store/ (docs/architecture.md): a string or template that reads as
// a statement anywhere else in src/ is refused.
const sql = "/^\\s*(SELECT\\s|INSERT\\s+INTO\\s|UPDATE\\s+\\w+\\s+SET\\s|DELETE\\s+FROM\\s|WITH\\s+\\w+\\s+AS\\s*\\(|CREATE\\s+(TABLE|INDEX)\\s|ALTER\\s+TABLE\\s|LISTEN\\s|NOTIFY\\s)/i";
const noSqlOutsideStore = [
  "error",
  { selector: `Literal[value=${sql}]`, message: "SQL belongs in src/store/: add a store method" },
  { selector: `TemplateLiteral > TemplateElement:first-child[value.raw=${sql}]`, message: "SQL belongs in src/store/: add a store method" },
];

export default tseslint.config(
  { ignores: ["node_modules/", "dist/", ".tools/", "src/gen/"] },
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  {
    files: ["src/**/*.ts"],
    ignores: ["src/store/**", "src/**/*.test.ts"],
    rules: { "no-restricted-syntax": noSqlOutsideStore },
  },
);
