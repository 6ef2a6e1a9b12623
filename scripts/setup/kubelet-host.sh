#!/usr/bin/env bash
# What the real-kubelet lane (test/kubernetes/kubelet-lane.test.ts) needs on the host besides
# the Kubernetes binaries (scripts/setup/k8s.sh, scripts/setup/k8s-node.sh): Debian's
# containerd (the lane starts its own instance; the package's service is not used),
# conntrack (kube-proxy) and the CNI reference plugins (bridge, host-local, loopback in
# /usr/lib/cni). Installed only when missing; idempotent; root only.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "kubelet-host.sh: not root; the kubelet lane will skip" >&2; exit 0; }
missing=()
for p in containerd conntrack containernetworking-plugins; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kubelet-host: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
