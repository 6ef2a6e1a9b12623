#!/usr/bin/env bash
# Python venv with schemathesis for test/e2e/schemathesis.test.ts (idempotent; pinned;
# reused while the pin is unchanged). Lives at .tools/schemathesis.
#   SPACE_SCHEMATHESIS_VENV=<dir>   put it elsewhere (the test reads the same variable)
#   SPACE_SETUP_SKIP_SCHEMATHESIS=1 skip it (the test then skips with the reason)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${SPACE_SCHEMATHESIS_VENV:-$REPO/.tools/schemathesis}"
REQS="$REPO/scripts/setup/schemathesis.txt"
[ "${SPACE_SETUP_SKIP_SCHEMATHESIS:-0}" = 1 ] && exit 0
bash "$REPO/scripts/setup/pinned-venv.sh" "$VENV" "$REQS" 'st --version'
echo "schemathesis: $("$VENV/bin/st" --version) in $VENV"
