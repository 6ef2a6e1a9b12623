#!/usr/bin/env bash
# Builds the real kubelet, kube-controller-manager and kube-proxy from the official Go
# modules (scripts/setup/k8s-node: k8s.io/kubernetes pinned like scripts/setup/k8s, every
# staging module replaced by its published v0.x) into one multi-call binary at
# .tools/k8s/<version>/space-k8s-node, beside the control plane's space-k8s. Cached as
# k8s.sh caches: a binary is kept (and copied to the machine-wide cache) only after its
# smoke test passes (each component reports the pinned version), keyed by the digest of
# the recipe (this script, the Go module, its sources).
#   scripts/setup/k8s-node.sh        build if missing, print the binary path
#   SPACE_K8S_BUILD_TIMEOUT=2400     seconds allowed for the build
#   SPACE_NO_CACHE=1                 ignore the machine-wide cache (prove a clean build)
#   SPACE_TOOLS_DIR=dir              keep it under dir/k8s instead of .tools (a checkout
#                                    whose .tools is shared)
# Beside it, the pod sandbox ("pause") image containerd runs for every pod, built from the
# same module's build/pause/linux/pause.c (gcc -static, one layer, umoci) as an OCI
# archive for `ctr images import`: pause.oci.tar, named registry.k8s.io/pause:$PAUSE.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
version=$(sed -n 's/^const version = "\(.*\)"/\1/p' scripts/setup/k8s-node/version.go)
if ! [[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "k8s-node.sh: version \"$version\" in scripts/setup/k8s-node/version.go is not vMAJOR.MINOR.PATCH" >&2
  exit 1
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
plane=$(sed -n 's/^const version = "\(.*\)"/\1/p' scripts/setup/k8s/version.go)
if [[ "$plane" != "$version" ]]; then
  echo "k8s-node.sh: node components $version differ from the control plane $plane (scripts/setup/k8s/version.go)" >&2
  exit 1
fi
recipe=$( (cat scripts/setup/k8s-node.sh scripts/setup/k8s-node/go.mod scripts/setup/k8s-node/go.sum scripts/setup/k8s-node/*.go) | sha256sum | cut -c1-16)
out="${SPACE_TOOLS_DIR:-$root/.tools}/k8s/$version"
bin="$out/space-k8s-node"
machine="${XDG_CACHE_HOME:-$HOME/.cache}/space/k8s/node-$version-$recipe/space-k8s-node"
names=(kubelet kube-controller-manager kube-proxy)

# A binary counts only with the recipe digest it was built from beside it.
current() { [[ -x "$1" ]] && [[ "$(cat "$1.recipe" 2>/dev/null)" == "$recipe" ]] && "$1" version >/dev/null 2>&1; }
links() { for n in "${names[@]}"; do ln -sf space-k8s-node "$out/$n"; done; }
# Each component, called by its own name, must report the pinned version.
smoke() {
  local dir n got
  dir=$(dirname "$1")
  for n in "${names[@]}"; do
    ln -sf "$(basename "$1")" "$dir/$n"
    got=$("$dir/$n" --version 2>&1) || { echo "$n --version failed: $got"; return 1; }
    [[ "$got" == "Kubernetes $version" ]] || { echo "$n reports \"$got\", not \"Kubernetes $version\""; return 1; }
  done
}

PAUSE=3.10.1
pause="$out/pause.oci.tar"
# The pause image: rebuilt when its archive is missing or was made by another recipe.
pause_image() {
  [[ -s "$pause" && "$(cat "$pause.recipe" 2>/dev/null)" == "$recipe" ]] && return 0
  local src w
  src=$(cd scripts/setup/k8s-node && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  w=$(mktemp -d)
  mkdir -p "$w/root"
  gcc -Os -static -DVERSION="v$PAUSE-space" -o "$w/root/pause" "$src" && strip "$w/root/pause"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$w/root" -cf "$w/layer.tar" .
  umoci init --layout "$w/oci" && umoci new --image "$w/oci:$PAUSE"
  umoci raw add-layer --image "$w/oci:$PAUSE" "$w/layer.tar"
  umoci config --image "$w/oci:$PAUSE" --config.entrypoint /pause --config.user 65535:65535
  skopeo copy --quiet "oci:$w/oci:$PAUSE" "oci-archive:$pause.tmp:registry.k8s.io/pause:$PAUSE"
  mv "$pause.tmp" "$pause" && echo "$recipe" > "$pause.recipe"
  rm -rf "$w"
}

if current "$bin"; then pause_image; echo "$bin"; exit 0; fi
mkdir -p "$out"
exec 9>"$out/.node-build.lock"
flock 9
if current "$bin"; then pause_image; echo "$bin"; exit 0; fi
if [[ "${SPACE_NO_CACHE:-0}" != 1 ]] && current "$machine"; then
  cp "$machine" "$bin.tmp" && mv "$bin.tmp" "$bin" && echo "$recipe" > "$bin.recipe" && links && pause_image
  echo "k8s-node.sh: copied from the machine cache $machine" >&2
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "k8s-node.sh: no Go toolchain (go on PATH); cannot build kubelet/kube-controller-manager/kube-proxy" >&2
  exit 1
fi
rm -f "$bin" "$bin.recipe"
new="$out/node-build/space-k8s-node"
rm -rf "$out/node-build" && mkdir -p "$out/node-build"
echo "k8s-node.sh: building space-k8s-node $version (first time on this machine: ~5-25 min)" >&2
start=$(date +%s)
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
(
  cd scripts/setup/k8s-node
  GOFLAGS=-mod=mod CGO_ENABLED=0 timeout "${SPACE_K8S_BUILD_TIMEOUT:-2400}" \
    go build -trimpath -ldflags "$ldflags" -o "$new" .
) || { rm -rf "$out/node-build"; echo "k8s-node.sh: go build failed (or exceeded SPACE_K8S_BUILD_TIMEOUT=${SPACE_K8S_BUILD_TIMEOUT:-2400}s)" >&2; exit 1; }
echo "k8s-node.sh: built in $(( $(date +%s) - start ))s, $(du -h "$new" | cut -f1); smoke test" >&2
if ! why=$(smoke "$new" 2>&1); then
  rm -rf "$out/node-build"
  echo "k8s-node.sh: the built binary failed its smoke test and was not kept: $why" >&2
  exit 1
fi
mv "$new" "$bin" && rm -rf "$out/node-build"
echo "$recipe" > "$bin.recipe"
links
pause_image
mkdir -p "$(dirname "$machine")" && cp "$bin" "$machine.tmp" && mv "$machine.tmp" "$machine" && echo "$recipe" > "$machine.recipe"
echo "k8s-node.sh: smoke test passed; cached at $machine" >&2
echo "$bin"
