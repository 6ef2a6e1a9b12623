#!/usr/bin/env node
// The one `space` binary: registers the TypeScript loader, then hands over to the CLI.
import { register } from "tsx/esm/api";
register();
const { main } = await import("../src/cli/main.ts");
await main(process.argv);
