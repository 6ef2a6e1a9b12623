#!/usr/bin/env bash
# Prints the Debian archive mirror this machine's apt is configured with (never a
# hard-coded host): SPACE_DEBIAN_MIRROR if set, else the first deb URI of the main archive
# in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources|*.list.
set -euo pipefail
if [ -n "${SPACE_DEBIAN_MIRROR:-}" ]; then echo "$SPACE_DEBIAN_MIRROR"; exit 0; fi
pick() { grep -v -e security -e updates | grep -E '/debian/?$' | head -1 || true; }
uri=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  uri="$(awk '/^URIs:/{for(i=2;i<=NF;i++)print $i}' "$f" | pick)"
  [ -n "$uri" ] && break
done
if [ -z "$uri" ]; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri="$(awk '$1=="deb"{for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}' "$f" | pick)"
    [ -n "$uri" ] && break
  done
fi
[ -n "$uri" ] || { echo "no Debian mirror in the apt sources; set SPACE_DEBIAN_MIRROR" >&2; exit 1; }
echo "${uri%/}"
