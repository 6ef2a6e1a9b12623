#!/usr/bin/env bash
# Builds helm from its official Go module (helm.sh/helm/v3, pinned below) into
# .tools/k8s/helm/<version>/helm, as scripts/setup/k8s.sh builds the Kubernetes binaries:
# kept (and copied to the machine-wide cache ~/.cache/space/k8s) only when `helm version`
# reports the pinned version. The cache key is the digest of this script.
#   scripts/setup/helm.sh        build if missing, print the binary path
#   SPACE_NO_CACHE=1             ignore the machine-wide cache (prove a clean build)
#   SPACE_TOOLS_DIR=dir          keep it under dir/k8s/helm instead of .tools (a checkout whose
#                                .tools is shared)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
version=v3.22.0
recipe=$(sha256sum scripts/setup/helm.sh | cut -c1-16)
out="${SPACE_TOOLS_DIR:-$root/.tools}/k8s/helm/$version"
bin="$out/helm"
machine="${XDG_CACHE_HOME:-$HOME/.cache}/space/k8s/helm-$version-$recipe/helm"

current() { [[ -x "$1" ]] && [[ "$(cat "$(dirname "$1")/recipe" 2>/dev/null)" == "$recipe" ]] && "$1" version --template '{{.Version}}' 2>/dev/null | grep -qx "$version"; }

if current "$bin"; then echo "$bin"; exit 0; fi
mkdir -p "$out"
exec 9>"$out/.build.lock"
flock 9
if current "$bin"; then echo "$bin"; exit 0; fi
if [[ "${SPACE_NO_CACHE:-0}" != 1 ]] && current "$machine"; then
  cp "$machine" "$bin.tmp" && mv "$bin.tmp" "$bin" && echo "$recipe" > "$out/recipe"
  echo "helm.sh: copied from the machine cache $machine" >&2
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "helm.sh: no Go toolchain (go on PATH); cannot build helm" >&2
  exit 1
fi
rm -f "$bin" "$out/recipe"
echo "helm.sh: building helm $version from its Go module (first time on this machine: a few minutes)" >&2
start=$(date +%s)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# What helm's release build (its Makefile) stamps in, a module build must stamp too: its
# version, and the Kubernetes version `helm template` and `helm lint` assume (client-go
# v0.<minor> of this helm's go.mod → 1.<minor>; unset, helm assumes 1.20).
kube_minor=37
v=helm.sh/helm/v3
ldflags="-s -w -X $v/internal/version.version=$version -X $v/internal/version.gitTreeState=clean"
for p in pkg/lint/rules pkg/chartutil; do ldflags+=" -X $v/$p.k8sVersionMajor=1 -X $v/$p.k8sVersionMinor=$kube_minor"; done
GOBIN="$build" CGO_ENABLED=0 timeout "${SPACE_HELM_BUILD_TIMEOUT:-1800}" \
  go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version" \
  || { echo "helm.sh: go install failed (or exceeded SPACE_HELM_BUILD_TIMEOUT)" >&2; exit 1; }
"$build/helm" version --template '{{.Version}}' | grep -qx "$version" \
  || { echo "helm.sh: the built helm does not report $version" >&2; exit 1; }
mkdir "$build/smoke" && printf 'apiVersion: v2\nname: smoke\nversion: 0.1.0\nkubeVersion: ">=1.%s.0-0"\n' "$kube_minor" > "$build/smoke/Chart.yaml"
"$build/helm" template smoke "$build/smoke" >/dev/null \
  || { echo "helm.sh: the built helm does not assume Kubernetes 1.$kube_minor" >&2; exit 1; }
mv "$build/helm" "$bin" && echo "$recipe" > "$out/recipe"
mkdir -p "$(dirname "$machine")" && cp "$bin" "$machine.tmp" && mv "$machine.tmp" "$machine" && echo "$recipe" > "$(dirname "$machine")/recipe"
echo "helm.sh: built in $(( $(date +%s) - start ))s; cached at $machine" >&2
echo "$bin"
