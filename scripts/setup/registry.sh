#!/usr/bin/env bash
# The local OCI registry the registry template tests run (test/support/local-registry.ts
# starts its instances on 127.0.0.1 ports of its own): Debian's docker-registry
# (distribution 2.8) and htpasswd (apache2-utils) for the basic-auth instance. Idempotent:
# installs only what is missing. The package's own service (port 5000) is not wanted: the
# tests start theirs, so it is stopped and disabled where systemd runs it.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "setup/registry.sh: not root; the registry template tests will skip" >&2
  exit 0
fi
missing=()
for p in docker-registry apache2-utils skopeo; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ -d /run/systemd/system ]; then systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi
fi
docker-registry --version >/dev/null
