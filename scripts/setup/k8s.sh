#!/usr/bin/env bash
# Builds the real kube-apiserver, kube-scheduler and an embedded etcd from the
# official Go modules (scripts/setup/k8s: k8s.io/kubernetes pinned, every
# staging module replaced by its published v0.x) into one multi-call binary,
# cached by version under .tools/k8s/<version>/. Idempotent; bounded in time.
# Tests that need it skip with a reason when the binary is absent.
#   scripts/setup/k8s.sh          build if missing, print the binary path
#   SPACE_K8S_BUILD_TIMEOUT=2400  seconds allowed for the build
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
version=$(sed -n 's/^const version = "\(.*\)"/\1/p' scripts/setup/k8s/version.go)
out="$root/.tools/k8s/$version"
bin="$out/space-k8s"
# Machine-wide copy: a fresh clone (CI) on a machine that built it once copies it.
machine="${XDG_CACHE_HOME:-$HOME/.cache}/space/k8s/$version/space-k8s"
if [[ -x "$bin" ]] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
if [[ -x "$machine" ]] && "$machine" version >/dev/null 2>&1; then
  mkdir -p "$out" && cp "$machine" "$bin.tmp" && mv "$bin.tmp" "$bin"
mkdir -p "$(dirname "$machine")" && cp "$bin" "$machine.tmp" && mv "$machine.tmp" "$machine"
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "k8s.sh: no Go toolchain; cannot build kube-apiserver/kube-scheduler" >&2
  exit 1
fi
mkdir -p "$out"
exec 9>"$root/.tools/k8s/.build.lock"
flock 9
if [[ -x "$bin" ]] && "$bin" version >/dev/null 2>&1; then echo "$bin"; exit 0; fi
echo "k8s.sh: building space-k8s $version (first time on this machine: ~10-20 min)" >&2
start=$(date +%s)
(
  cd scripts/setup/k8s
  GOFLAGS=-mod=mod CGO_ENABLED=0 timeout "${SPACE_K8S_BUILD_TIMEOUT:-2400}" \
    go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1" -o "$bin.tmp" .
)
mv "$bin.tmp" "$bin"
mkdir -p "$(dirname "$machine")" && cp "$bin" "$machine.tmp" && mv "$machine.tmp" "$machine"
for n in kube-apiserver kube-scheduler; do ln -sf space-k8s "$out/$n"; done
echo "k8s.sh: built in $(( $(date +%s) - start ))s, $(du -h "$bin" | cut -f1)" >&2
echo "$bin"
