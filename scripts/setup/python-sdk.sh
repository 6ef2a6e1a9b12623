#!/usr/bin/env bash
# Python venv with the official e2b Python SDK for test/e2e/python-sdk.test.ts
# (idempotent; pinned; reused while the pin is unchanged). Lives at .tools/py.
#   SPACE_SETUP_SKIP_PYTHON_SDK=1   skip it (the Python SDK e2e test then skips with the reason)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$REPO/.tools/py"
REQS="$REPO/scripts/setup/python-sdk.txt"
PINS="$(sha256sum "$REQS" | cut -c1-16)"

[ "${SPACE_SETUP_SKIP_PYTHON_SDK:-0}" = 1 ] && exit 0
if [ -f "$VENV/.pins" ] && [ "$(cat "$VENV/.pins")" = "$PINS" ] && "$VENV/bin/python" -c "import e2b" 2>/dev/null; then
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
echo "python-sdk: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("e2b", m.version("e2b"))') in $VENV"
