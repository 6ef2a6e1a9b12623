#!/usr/bin/env bash
# Debian's chromium, for the dashboard's browser tests (test/e2e/dashboard.test.ts drives it
# with playwright-core through its executablePath; no browser download from anywhere else).
# Idempotent: installs only when missing. Prints the binary's path.
set -euo pipefail
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "chromium.sh: chromium is missing and this is not root; run as root: bash scripts/setup/chromium.sh" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
fi
chromium --headless=new --no-sandbox --disable-gpu --dump-dom about:blank >/dev/null 2>&1 || {
  echo "chromium.sh: chromium is installed but does not start headless" >&2
  exit 1
}
command -v chromium
