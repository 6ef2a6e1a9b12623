#!/usr/bin/env bash
# Machine setup for SPACE nodes (idempotent; run as root). Installs the system tools the
# node agent uses, turns on IPv4 forwarding, builds CRIU 4.1.1 once per machine, mounts
# the hugetlb v1 controller crun needs on hybrid cgroups, and builds the `base` template
# tarball once per machine (debootstrap, ~1 min the first time; cached under .tools/), then
# the `code-interpreter-v1` one (base + pinned PyPI packages, ~30 s; beside it).
#   SPACE_SETUP_SKIP_TEMPLATE=1   skip the base template (and the code interpreter's)
#   SPACE_SETUP_SKIP_CODE_INTERPRETER=1   skip the code-interpreter-v1 template
#   SPACE_SETUP_SKIP_CRIU=1       skip the CRIU build
#   SPACE_NO_CACHE=1              ignore the machine-wide cache (build CRIU and the base
#                                 template from scratch, as a new machine would)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$(date +%s)

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: not root; skipping machine setup (only SPACE_RUNTIME=process works without root)" >&2
  exit 0
fi

# 1. Debian packages (installed only when missing, so a set-up machine pays nothing).
PKGS=(runc crun btrfs-progs nftables iproute2 util-linux debootstrap postgresql xz-utils zstd libarchive-tools ca-certificates
      build-essential pkg-config libbsd-dev libcap-dev libnet1-dev libnl-3-dev libprotobuf-c-dev
      libprotobuf-dev protobuf-c-compiler protobuf-compiler python3-protobuf uuid-dev
      libaio-dev umoci skopeo libnss-myhostname)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# `*.localhost` → loopback for getHost() URLs (`<port>-<id>.localhost:<gateway port>`, the
# default sandbox domain): glibc alone resolves only `localhost`; nss-myhostname resolves
# every name under it. Its package adds itself to nsswitch.conf; a hand-edited one may lack it.
if ! grep -qE '^hosts:.*\bmyhostname\b' /etc/nsswitch.conf; then
  sed -i -E 's/^(hosts:[[:space:]]+files)/\1 myhostname/' /etc/nsswitch.conf
fi

# 2. Kernel knobs: NAT egress for sandboxes needs forwarding (defaults to 0 here).
sysctl -qw net.ipv4.ip_forward=1
modprobe btrfs 2>/dev/null || true
modprobe loop 2>/dev/null || true

# 3. crun refuses "cgroups in hybrid mode" until hugetlb is mounted as v1 at exactly this path
#    (whatever SPACE_RUNTIME is: the fleet e2e runs one crun node beside runc ones).
if [ -d /sys/fs/cgroup/memory ] && ! mountpoint -q /sys/fs/cgroup/hugetlb; then
  mkdir -p /sys/fs/cgroup/hugetlb
  mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
fi

# Machine-wide cache: a fresh clone on a machine that built CRIU and the base template
# once reuses them (their cache keys travel with them, so a changed recipe still rebuilds).
MACHINE_CACHE="${SPACE_MACHINE_CACHE:-/var/cache/space}"
TEMPLATES="${SPACE_BASE_TEMPLATE_DIR:-$REPO/.tools/templates}"
mkdir -p "$REPO/.tools/criu" "$TEMPLATES" "$MACHINE_CACHE/criu" "$MACHINE_CACHE/templates"
if [ "${SPACE_NO_CACHE:-0}" = 1 ]; then
  echo "setup: SPACE_NO_CACHE=1: not using the machine cache $MACHINE_CACHE"
else
  cp -n "$MACHINE_CACHE"/criu/criu "$MACHINE_CACHE"/criu/patches "$REPO/.tools/criu/" 2>/dev/null || true
  cp -n "$MACHINE_CACHE"/templates/* "$TEMPLATES/" 2>/dev/null || true
fi
save_machine_cache() {
  cp -f "$REPO/.tools/criu/criu" "$REPO/.tools/criu/patches" "$MACHINE_CACHE/criu/" 2>/dev/null || true
  cp -n "$TEMPLATES"/*.tar "$TEMPLATES"/*.json "$MACHINE_CACHE/templates/" 2>/dev/null || true
}

# 4. The btrfs simple-quota switch the node cache uses (.tools/bin/btrfs-squota; see its source).
mkdir -p "$REPO/.tools/bin"
if [ ! -x "$REPO/.tools/bin/btrfs-squota" ] || [ "$REPO/scripts/setup/btrfs-squota.c" -nt "$REPO/.tools/bin/btrfs-squota" ]; then
  cc -O2 -Wall -Werror -o "$REPO/.tools/bin/btrfs-squota" "$REPO/scripts/setup/btrfs-squota.c"
fi

# 5. CRIU 4.1.1 (memory checkpoints), cached at .tools/criu/criu.
if [ "${SPACE_SETUP_SKIP_CRIU:-0}" != 1 ]; then
  bash "$REPO/scripts/setup/criu.sh" "$REPO"
fi

# 6. The base template tarball (debootstrap of bookworm), cached at .tools/templates/ (or
#    SPACE_BASE_TEMPLATE_DIR), named by its recipe's digest: a changed recipe builds anew.
if [ "${SPACE_SETUP_SKIP_TEMPLATE:-0}" != 1 ]; then
  (cd "$REPO" && node --import tsx scripts/setup/build-base-template.ts)
  # pip verifies PyPI with the host's CA bundle (a TLS-inspecting proxy's CA is trusted there).
  if [ "${SPACE_SETUP_SKIP_CODE_INTERPRETER:-0}" != 1 ]; then
    (cd "$REPO" && node --import tsx scripts/setup/build-code-interpreter-template.ts)
  fi
fi

# 6b. The local OCI registry the registry template tests start (docker-registry, htpasswd).
bash "$REPO/scripts/setup/registry.sh"

# 6c. containerd, conntrack and the CNI plugins for the real-kubelet lane (test/kubernetes/kubelet-lane.test.ts).
bash "$REPO/scripts/setup/kubelet-host.sh"

# 7. The e2b Python SDK venv for test/e2e/python-sdk.test.ts (.tools/py; pinned, reused).
bash "$REPO/scripts/setup/python-sdk.sh" || echo "setup: no Python SDK venv; test/e2e/python-sdk will skip" >&2

# 8. Debian's chromium for the dashboard's browser tests (test/e2e/dashboard.test.ts).
bash "$REPO/scripts/setup/chromium.sh" >/dev/null

save_machine_cache
echo "setup: done in $(( $(date +%s) - started )) s"
