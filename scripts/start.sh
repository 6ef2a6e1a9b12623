#!/usr/bin/env bash
# `npm start`: install what SPACE needs on this machine (once; later runs are quick),
# then run the whole platform with `space up`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/setup.sh
npm run --silent build:envd
exec node bin/space.mjs up "$@"
