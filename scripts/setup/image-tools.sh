#!/usr/bin/env bash
# The tools scripts/image/build.sh uses to build SPACE's OCI image and prove it runs:
# mmdebstrap (the Debian root file system), umoci (layers into an OCI layout), skopeo
# (copies it into podman's store) and podman (runs it). Debian packages, installed only
# when missing (idempotent; run as root).
set -euo pipefail
PKGS=(mmdebstrap umoci skopeo podman uidmap)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "image-tools: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
