/**
 * A real browser for the dashboard's tests and bench: Debian's chromium
 * (scripts/setup/chromium.sh installs it) driven by playwright-core over CDP. Screenshots
 * go to dist/test-artifacts/dashboard/ (ignored output) unless SPACE_TEST_ARTIFACTS names
 * another directory.
 */
import { existsSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { chromium, type Browser } from "playwright-core";

export const CHROMIUM = process.env.SPACE_CHROMIUM ?? "/usr/bin/chromium";

export const ARTIFACTS = resolve(process.env.SPACE_TEST_ARTIFACTS ?? join("dist", "test-artifacts", "dashboard"));

/** Why a browser test cannot run here, or false. */
export function browserSkip(): string | false {
  return existsSync(CHROMIUM) ? false : `no chromium at ${CHROMIUM} (bash scripts/setup/chromium.sh)`;
}

export async function launchBrowser(): Promise<Browser> {
  mkdirSync(ARTIFACTS, { recursive: true });
  // --no-sandbox: the tests run as root, where chromium's own sandbox refuses to start.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
}
