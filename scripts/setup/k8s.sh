#!/usr/bin/env bash
# Builds the real kube-apiserver, kube-scheduler and an embedded etcd from the
# official Go modules (scripts/setup/k8s: k8s.io/kubernetes pinned, every
# staging module replaced by its published v0.x) into one multi-call binary at
# .tools/k8s/<version>/space-k8s. A binary is kept (and copied to the machine-wide
# cache) only after it passes the smoke test: etcd + kube-apiserver start and
# /readyz answers ok. The cache key is the digest of the recipe (this script, the
# Go module, its sources), so a binary built by an older recipe is never reused.
#   scripts/setup/k8s.sh          build if missing, print the binary path
#   SPACE_K8S_BUILD_TIMEOUT=2400  seconds allowed for the build
#   SPACE_NO_CACHE=1              ignore the machine-wide cache (prove a clean build)
#   SPACE_K8S_LDFLAGS_EXTRA=...   extra -ldflags (to prove the smoke test refuses a bad build)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
version=$(sed -n 's/^const version = "\(.*\)"/\1/p' scripts/setup/k8s/version.go)
if ! [[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "k8s.sh: version \"$version\" in scripts/setup/k8s/version.go is not vMAJOR.MINOR.PATCH" >&2
  exit 1
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
recipe=$( (cat scripts/setup/k8s.sh scripts/setup/k8s-smoke.sh scripts/setup/k8s/go.mod scripts/setup/k8s/go.sum scripts/setup/k8s/*.go; echo "${SPACE_K8S_LDFLAGS_EXTRA:-}") | sha256sum | cut -c1-16)
out="$root/.tools/k8s/$version"
bin="$out/space-k8s"
machine="${XDG_CACHE_HOME:-$HOME/.cache}/space/k8s/$version-$recipe/space-k8s"

# A binary counts only with the recipe digest it was built from beside it.
current() { [[ -x "$1" ]] && [[ "$(cat "$(dirname "$1")/recipe" 2>/dev/null)" == "$recipe" ]] && "$1" version >/dev/null 2>&1; }
links() { for n in kube-apiserver kube-scheduler; do ln -sf space-k8s "$out/$n"; done; }

if current "$bin"; then echo "$bin"; exit 0; fi
mkdir -p "$out"
exec 9>"$root/.tools/k8s/.build.lock"
flock 9
if current "$bin"; then echo "$bin"; exit 0; fi
if [[ "${SPACE_NO_CACHE:-0}" != 1 ]] && current "$machine"; then
  cp "$machine" "$bin.tmp" && mv "$bin.tmp" "$bin" && echo "$recipe" > "$out/recipe" && links
  echo "k8s.sh: copied from the machine cache $machine" >&2
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "k8s.sh: no Go toolchain (go on PATH); cannot build kube-apiserver/kube-scheduler" >&2
  exit 1
fi
rm -rf "$bin" "$out/recipe" "$out/build"
# The multi-call binary dispatches on its own name, so it is built (and smoke-tested)
# as build/space-k8s and moved into place only when it passed.
new="$out/build/space-k8s"
mkdir -p "$out/build"
echo "k8s.sh: building space-k8s $version (first time on this machine: ~4-20 min)" >&2
start=$(date +%s)
# Every field of component-base/version comes from the one pinned version: the
# apiserver's admission (pod-security) parses gitMinor and panics when it is empty.
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean ${SPACE_K8S_LDFLAGS_EXTRA:-}"
(
  cd scripts/setup/k8s
  GOFLAGS=-mod=mod CGO_ENABLED=0 timeout "${SPACE_K8S_BUILD_TIMEOUT:-2400}" \
    go build -trimpath -ldflags "$ldflags" -o "$new" .
) || { rm -rf "$out/build"; echo "k8s.sh: go build failed (or exceeded SPACE_K8S_BUILD_TIMEOUT=${SPACE_K8S_BUILD_TIMEOUT:-2400}s)" >&2; exit 1; }
echo "k8s.sh: built in $(( $(date +%s) - start ))s, $(du -h "$new" | cut -f1); smoke test" >&2
if ! why=$(bash scripts/setup/k8s-smoke.sh "$new" 2>&1); then
  rm -rf "$out/build"
  echo "k8s.sh: the built binary failed its smoke test and was not kept:" >&2
  echo "$why" >&2
  exit 1
fi
mv "$new" "$bin" && rm -rf "$out/build"
echo "$recipe" > "$out/recipe"
links
mkdir -p "$(dirname "$machine")" && cp "$bin" "$machine.tmp" && mv "$machine.tmp" "$machine" && echo "$recipe" > "$(dirname "$machine")/recipe"
echo "k8s.sh: smoke test passed; cached at $machine" >&2
echo "$bin"
