#!/usr/bin/env bash
# Python venv with the official e2b Python SDK for test/e2e/python-sdk.test.ts
# (idempotent; pinned; reused while the pin is unchanged). Lives at .tools/py.
#   SPACE_SETUP_SKIP_PYTHON_SDK=1   skip it (the Python SDK e2e test then skips with the reason)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$REPO/.tools/py"
REQS="$REPO/scripts/setup/python-sdk.txt"
[ "${SPACE_SETUP_SKIP_PYTHON_SDK:-0}" = 1 ] && exit 0
bash "$REPO/scripts/setup/pinned-venv.sh" "$VENV" "$REQS" 'python -c "import e2b, e2b_code_interpreter"'
echo "python-sdk: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("e2b", m.version("e2b"), "e2b-code-interpreter", m.version("e2b-code-interpreter"))') in $VENV"
