#!/usr/bin/env bash
# Builds CRIU 4.1.1 from Debian's copy of the upstream tarball (Debian 12's criu 3.17 fails
# on kernels >= 6.13: "vdso: Unexpected rt vDSO area bounds"). Built once per machine and
# cached at <repo>/.tools/criu/criu. Usage: criu.sh <repo dir>
set -euo pipefail
REPO="$1"
OUT="$REPO/.tools/criu"
VERSION=4.1.1
SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
TARBALL="criu_${VERSION}.orig.tar.xz"

# CRIU caches the kernel features it probes (~40-70 ms a run) only on tmpfs; its default,
# /run, is not tmpfs on every host. Ours is a tmpfs dir the node mounts when needed
# (src/runtime/oci/checkpoint.ts, CRIU_KDAT_DIR).
RUNDIR=/run/space/criu
# Without GnuTLS (TLS for a page server, which we never run) and nftables (CRIU's network
# lock, which our dumps skip; the sandbox's netns is the node's, never dumped): CRIU then
# links 8 libraries, not 22, and starts in ~1 ms, not ~3. runc starts it twice for each
# dump and restore (a version query, then the work).
FLAGS=(RUNDIR="$RUNDIR" NO_GNUTLS=1 NO_NFTABLES=1)
# Local patches (scripts/setup/criu-patches) and the build's flags: their digest is part of the cache key.
PATCHES="$( (cat "$REPO"/scripts/setup/criu-patches/*.patch 2>/dev/null; echo "${FLAGS[*]}") | sha256sum | cut -c1-16)"
if [ -x "$OUT/criu" ] && "$OUT/criu" --version 2>/dev/null | grep -q "Version: $VERSION" \
   && [ "$(cat "$OUT/patches" 2>/dev/null)" = "$PATCHES" ]; then
  echo "criu $VERSION: cached at $OUT/criu"
  exit 0
fi
mkdir -p "$OUT/src"
cd "$OUT/src"

if ! echo "$SHA256  $TARBALL" | sha256sum -c --status 2>/dev/null; then
  # The Debian mirror this machine already uses (first deb entry of the main archive).
  MIRROR="$(bash "$REPO/scripts/setup/debian-mirror.sh")"
  APTDIR="$OUT/apt"
  mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
  # trusted=yes: the one file we take from this source is verified by sha256 below.
  echo "deb-src [trusted=yes] $MIRROR trixie main" > "$APTDIR/sources.list"
  APTOPTS=(-o "Dir::Etc::SourceList=$APTDIR/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
           -o "Dir::State::Lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache" -o "APT::Sandbox::User=root")
  echo "criu: fetching $TARBALL from $MIRROR (trixie deb-src)"
  apt-get "${APTOPTS[@]}" -qq update
  # apt exits non-zero (it cannot unpack without dpkg-dev) even though the tarball arrives.
  apt-get "${APTOPTS[@]}" -qq source --download-only "criu=${VERSION}-1" >/dev/null 2>&1 || true
  echo "$SHA256  $TARBALL" | sha256sum -c - || { echo "criu: checksum of $TARBALL does not match" >&2; exit 1; }
fi

rm -rf "criu-$VERSION"
tar -xJf "$TARBALL"
cd "criu-$VERSION"
for p in "$REPO"/scripts/setup/criu-patches/*.patch; do
  [ -e "$p" ] && patch -p1 -s < "$p"
done
echo "criu: building (about 40 s on 2 cores)"
make -j"$(nproc)" criu "${FLAGS[@]}" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log" >&2; exit 1; }
install -m 0755 criu/criu "$OUT/criu.new"
mv "$OUT/criu.new" "$OUT/criu"
echo "$PATCHES" > "$OUT/patches"
cd "$OUT/src" && rm -rf "criu-$VERSION"
"$OUT/criu" --version | head -1
