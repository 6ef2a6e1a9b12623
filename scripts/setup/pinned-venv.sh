#!/usr/bin/env bash
# A Python venv holding a pinned requirements file, rebuilt only when the pins change:
#   bash scripts/setup/pinned-venv.sh <venv dir> <requirements file> <command that proves it>
# The proof runs with the venv's bin/ first on PATH; a venv whose pins match and whose proof
# passes is kept as it is. Used by python-sdk.sh and schemathesis.sh.
set -euo pipefail
VENV="$1" REQS="$2" PROOF="$3"
PINS="$(sha256sum "$REQS" | cut -c1-16)"
proven() { PATH="$VENV/bin:$PATH" bash -c "$PROOF" >/dev/null 2>&1; }
if [ -f "$VENV/.pins" ] && [ "$(cat "$VENV/.pins")" = "$PINS" ] && proven; then
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
proven || { echo "pinned-venv: $VENV installed from $REQS, but '$PROOF' fails" >&2; exit 1; }
echo "$PINS" > "$VENV/.pins"
