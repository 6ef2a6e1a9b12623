#!/usr/bin/env bash
# Python venv with schemathesis for test/e2e/schemathesis.test.ts (idempotent; pinned;
# reused while the pin is unchanged). Lives at .tools/schemathesis.
#   SPACE_SCHEMATHESIS_VENV=<dir>   put it elsewhere (the test reads the same variable)
#   SPACE_SETUP_SKIP_SCHEMATHESIS=1 skip it (the test then skips with the reason)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${SPACE_SCHEMATHESIS_VENV:-$REPO/.tools/schemathesis}"
REQS="$REPO/scripts/setup/schemathesis.txt"
PINS="$(sha256sum "$REQS" | cut -c1-16)"

[ "${SPACE_SETUP_SKIP_SCHEMATHESIS:-0}" = 1 ] && exit 0
if [ -f "$VENV/.pins" ] && [ "$(cat "$VENV/.pins")" = "$PINS" ] && [ -x "$VENV/bin/st" ]; then
  exit 0
fi
# Debian's python3 has venv (and ensurepip) only with python3-venv.
if ! python3 -c "import ensurepip, venv" 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQS"
echo "$PINS" > "$VENV/.pins"
echo "schemathesis: $("$VENV/bin/st" --version) in $VENV"
